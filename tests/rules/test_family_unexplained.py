"""The unexplained-time family (``rules/families/unexplained.py``): the step's account leaves
time no finding claims, far from the roofline; the lines holding it name where it goes and
what to look at first. Hand-written accounts (``rules/account_rules.StepAccount``)."""

from __future__ import annotations

from dataclasses import replace

from tests.rules.run_records import record
from torchdoctor.record.run import RunRecord
from torchdoctor.rules.account_rules import StepAccount, TopLine
from torchdoctor.rules.families import unexplained
from torchdoctor.rules.run_common import make

(RULE,) = unexplained.RULES

POOL = TopLine(
    "/w/infer.py:34", "main", "y = pool(x)", 60.0, 60.0, 55.0, "torch ops", ["aten::max_pool2d"]
)


def _account(unexplained_ms: float, lines: list[TopLine]) -> StepAccount:
    """A 100 ms step whose roofline is 10 ms."""
    return StepAccount(
        step_ms=100.0,
        roofline_ms=10.0,
        efficiency=0.1,
        flops_share=0.5,
        bytes_share=0.5,
        attainable="measured",
        allowance_ms=10.0,
        named_ms=100.0 - 10.0 - unexplained_ms,
        contention_ms=0.0,
        unexplained_ms=unexplained_ms,
        explained=False,
        top_lines=lines,
    )


def test_time_no_finding_claims_is_named_at_its_line() -> None:
    m = RULE.measure((_account(60.0, [POOL]), 100.0))
    assert m is not None and RULE.fires(m)
    s = RULE.spec
    assert s.format_title(**m.title) == (
        "60% of the step (60.0 ms) is not explained: it runs at 10% of this machine's "
        "roofline; most time at infer.py:34 (torch ops: aten::max_pool2d)"
    )
    assert m.saving_ms == 60.0 and m.where == ("/w/infer.py:34",)
    assert "channels_last" in s.fix(**m.fix)
    f = make(RunRecord.from_dict(record()), s.id, "t", m.saving_ms, m.evidence, fix="x")
    assert f.severity == "critical"  # 60% of the step


def test_an_explained_step_or_one_with_nothing_to_point_at_is_quiet() -> None:
    m = RULE.measure((_account(5.0, [POOL]), 100.0))
    assert m is not None and not RULE.fires(m)  # 5%, under UNEXPLAINED_SHARE
    blind = replace(_account(60.0, []), roofline_ms=None)
    assert RULE.measure((blind, 100.0)) is None  # neither counted nor sampled
    assert RULE.measure((None, 100.0)) is None
