"""A registry entry declares only what differs from the common case (``rules/spec.py``): the
defaults it leaves out, the analyses found from the rules that measure it, a measurement graded
on its saving's share, and the same-cause pairs an entry carries (``FindingSpec.same_cause``)."""

from __future__ import annotations

import pytest

from tests.rules.test_same_cause import LOOP, _f, _rare, _record, _restart
from torchdoctor.rules import registry, thresholds
from torchdoctor.rules.same_cause import fold_same_cause
from torchdoctor.rules.spec import FindingSpec, Measured, SeverityPolicy, static


def test_an_entry_leaves_out_the_common_case() -> None:
    s = FindingSpec(id="x", label="x", title="x", fix=static("x"), explanation="x", doc_url="u")
    assert s.severity == SeverityPolicy(thresholds.WARNING_SHARE, thresholds.CRITICAL_SHARE)
    assert s.threshold is None and s.sources == () and s.probe == "host"
    with pytest.raises(TypeError):  # keywords only: no entry depends on the fields' order
        FindingSpec("x", "x", "x", static("x"), "x", "u")  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fid", "sources"),
    [
        ("host-bound", ("trace", "run")),  # its run rule is written by hand: the entry says so
        ("data-parallel", ("trace", "run")),  # one family, a trace rule and a run rule
        ("straggler-rank", ("ranks",)),
        ("unexplained-step-time", ("run",)),  # measured on the run's step account
        ("gc-in-step", ("run",)),
        ("sync-stalls", ("trace",)),
    ],
)
def test_sources_are_those_of_the_rules_that_measure_it(fid: str, sources: tuple) -> None:
    assert registry.sources(fid) == sources


def test_a_measurement_without_a_share_is_graded_on_its_saving() -> None:
    policy = SeverityPolicy(0.05, 0.25)
    m = Measured(1.0, saving_ms=30.0)
    assert [m.severity(policy, s) for s in (0.3, 0.1, 0.01)] == ["critical", "warning", "info"]
    assert Measured(1.0, saving_ms=30.0, share=0.01).severity(policy, 0.3) == "info"
    with pytest.raises(ValueError, match="share"):
        m.severity(policy)


def test_same_cause_pairs_name_registered_findings() -> None:
    pairs = [(s.id, c.kept) for s in registry.REGISTRY.values() for c in s.same_cause]
    assert pairs == [
        ("host-bound", "work-beside-step"),
        ("gc-in-step", "housekeeping-in-step"),
        ("rare-long-steps", "repeated-construction"),
        ("rare-long-steps", "dataloader-config"),
    ]


def test_a_rebuilt_iterator_takes_the_long_steps_before_the_loader() -> None:
    # both could absorb the epoch starts' long steps: the spec's order says which one does
    rebuilt = _f(
        "repeated-construction",
        30.0,
        {"constructions": [{"kind": "dataloader iterator", "site": LOOP}]},
        [LOOP],
    )
    folded = fold_same_cause([_restart(), rebuilt, _rare({6: 300.0})], _record({6: LOOP}))
    by_id = {f.id: f for f in folded}
    assert set(by_id) == {"dataloader-config", "repeated-construction"}
    assert "rare-long-steps_evidence" in by_id["repeated-construction"].evidence
    assert "rare-long-steps_evidence" not in by_id["dataloader-config"].evidence
