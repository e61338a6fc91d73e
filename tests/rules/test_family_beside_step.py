"""The work-beside-the-step family (``rules/families/beside_step.py``): a finding per helper
whose sampled time is not the step's, as a share of the step, with enough samples behind it;
quiet under the spec's share or its samples gate. The sampled line tables are those of
``tests/capture/test_work_beside_step.py`` (more cases there)."""

from __future__ import annotations

from tests.capture.test_work_beside_step import LOOP, _record, _row
from torchdoctor.rules.families import beside_step
from torchdoctor.rules.run_common import family_findings

(RULE,) = beside_step.RULES
EMA = _row("t.py:14", "update_ema", 3.0, [["", 3.0]], [["aten::mul", 1.8], ["aten::add", 1.2]])
COPY = _row("t.py:11", "keep_best", 2.0, [["stdlib:copy|deepcopy", 2.0]], [])


def test_each_helper_beside_the_step_is_a_finding() -> None:
    fs = family_findings(RULE, _record([*LOOP, EMA, COPY]))
    assert [f.title for f in fs] == [
        "tensor-by-tensor updates (mul, add) at t.py:14 (update_ema): 3.0 ms per step (30%), "
        "outside the model's forward, backward and the optimizer's step",
        "copy.deepcopy at t.py:11 (keep_best): 2.0 ms per step (20%), outside the model's "
        "forward, backward and the optimizer's step",
    ]
    assert fs[0].evidence["samples"] == 30.0  # 3 ms a step, 5 steps, a sample every 0.5 ms
    assert "_foreach_lerp_" in fs[0].fix and "kept.copy_(t)" in fs[1].fix


def test_under_the_share_or_the_samples_it_is_quiet() -> None:
    small = _row("t.py:14", "update_ema", 0.7, [["", 0.7]], [["aten::mul", 0.7]])
    assert family_findings(RULE, _record([*LOOP, small])) == []  # 7% < ASIDE_SHARE's 8%
    rec = _record([*LOOP, EMA])
    # sampled every 50 ms: the helper's 3 ms a step over 5 steps is 0.3 samples, under 3
    rec.raw["lines"]["interval_s"] = 0.05
    sparse = type(rec).from_dict(rec.raw)
    assert family_findings(RULE, sparse) == []


def test_a_print_or_other_line_runs_every_n_steps_in_place_of_the_users_line() -> None:
    from torchdoctor.rules.families.beside_step import beside_fix

    line = 'print(f"step {step} logits {logits.detach()}")  # debug'
    fix = beside_fix("main", "t.py:31", line, "print")
    assert fix.endswith(
        "in place of the line at t.py:31:\n"
        "if step % 100 == 0:\n    print(f'step {step} logits {logits.detach()}')"
    )
    fix = beside_fix("main", "t.py:45", "json.dump(history, f, indent=2)", "other")
    assert fix.endswith("if step % 100 == 0:\n    json.dump(history, f, indent=2)")
    # the first line of a longer statement, or a return, is not a statement to move under an if
    for code in ("print(f'step {step}',", "return copy.deepcopy(model)"):
        fix = beside_fix("main", "t.py:9", code, "other")
        assert all(ln.startswith("#") for ln in fix.splitlines()), fix
