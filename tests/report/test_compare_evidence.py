"""What ``compare`` may claim from one run, several runs or interleaved rounds; the costs the user
pays (mean step, one-time cost, time to N, break-even); a verdict that never contradicts them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from torchdoctor import stats
from torchdoctor.compare.cost import RunCost
from torchdoctor.compare.diff import compare
from torchdoctor.compare.estimates import MIN_RUNS_FOR_INTERVAL, estimates, run_to_run_log_sd
from torchdoctor.compare.render import render_text
from torchdoctor.compare.runs import load_runs, run_paths
from torchdoctor.compare.sides import Side
from torchdoctor.compare.verdict import decide


def _side(ms: np.ndarray | list[float], warm: list[float] | None = None, **kw: object) -> Side:
    return Side(
        path="x",
        kind="check-run",
        step_ms=np.asarray(ms, dtype=float),
        warmup_ms=np.asarray(warm or [], dtype=float),
        **kw,  # type: ignore[arg-type]
    )


def test_widened_adds_variances_on_the_log_scale() -> None:
    iv = stats.RatioInterval(1.2, 1.1, 1.3, 0.95, 10, "bootstrap")
    assert stats.widened(iv, 0.0) == iv
    w = stats.widened(iv, 0.1)
    z = 1.959963984540054
    assert math.log(1.2 / w.low) == pytest.approx(math.hypot(math.log(1.2 / 1.1), z * 0.1))
    assert math.log(w.high / 1.2) == pytest.approx(math.hypot(math.log(1.3 / 1.2), z * 0.1))
    none = stats.RatioInterval(1.2, 0.0, math.inf, 0.0, 3, "rank")
    assert stats.widened(none, 0.5) == none
    with pytest.raises(ValueError):
        stats.widened(iv, -1.0)


def test_run_to_run_allowance_is_the_95pct_range_of_two_runs() -> None:
    sd = run_to_run_log_sd(100.0)
    # +/-100%: 95% of log ratios of two runs within log(2)
    assert 1.959963984540054 * sd == pytest.approx(math.log(2.0))


def test_mean_ratio_counts_stalls_the_median_hides() -> None:
    base = [10.0] * 9 + [500.0]  # one worker start-up stall in ten steps
    new = [12.0] * 10
    iv = stats.mean_ratio_interval(base, new)
    assert iv.ratio == pytest.approx(59.0 / 12.0)
    assert iv.low <= iv.ratio <= iv.high
    assert stats.independent_ratio_interval(base, new, method="bootstrap").ratio < 1.0


def test_min_runs_for_an_interval_matches_the_rank_test() -> None:
    def exists(k: int) -> bool:
        return stats.independent_ratio_interval(np.arange(k) + 1.0, np.arange(k) + 1.5).low > 0

    assert exists(MIN_RUNS_FOR_INTERVAL) and not exists(MIN_RUNS_FOR_INTERVAL - 1)


def test_runs_are_tested_on_runs_not_steps() -> None:
    """Four runs a side whose steps are tight within each run but whose run means interleave
    (machine drift): pooled steps would look wildly significant; the runs do not."""
    base_means, new_means = [10.0, 13.0, 11.0, 14.0], [10.4, 13.4, 11.4, 14.4]
    base = [_side(np.full(50, m) + np.linspace(0, 0.01, 50)) for m in base_means]
    new = [_side(np.full(50, m) + np.linspace(0, 0.01, 50)) for m in new_means]
    pooled = stats.mann_whitney(
        np.concatenate([s.step_ms for s in new]), np.concatenate([s.step_ms for s in base])
    )
    assert pooled.p_value < 1e-4  # what a test on steps would have said
    c = compare(base, new)
    mean = c.estimates["mean_step"]
    assert c.evidence == "runs" and (mean.n_base, mean.n_new) == (4, 4)
    assert mean.p_value == pytest.approx(stats.mann_whitney(new_means, base_means).p_value)
    assert not mean.decided and "within the noise" in c.verdict


def test_separated_runs_decide_and_three_a_side_cannot() -> None:
    base = [_side(np.full(5, 10.0 + i * 0.1)) for i in range(4)]
    new = [_side(np.full(5, 8.0 + i * 0.1)) for i in range(4)]
    c = compare(base, new)
    assert c.decision.decided and c.verdict.startswith("NEW is faster")
    assert c.estimates["mean_step"].p_value == pytest.approx(2 / 70)
    three = compare(base[:3], new[:3])
    assert not three.decision.decided and "too few runs" in three.verdict


def test_verdict_follows_the_mean_and_names_the_median_that_moved_the_other_way() -> None:
    """The issue's case: epoch-start stalls removed, so the mean step fell while the median
    rose. The verdict follows the mean (what the user pays) and says why the median differs."""
    base = _side([10.0] * 18 + [900.0, 900.0])
    new = _side([19.0] * 20)
    c = compare(base, new)
    assert c.estimates["median_step"].speedup.ratio < 1 < c.estimates["mean_step"].speedup.ratio
    assert c.verdict.startswith("NEW looks faster: mean step")
    assert "median" in c.verdict and "moved the other way" in c.verdict
    text = render_text(c)
    assert c.throughput_change > 0 and "steps/s over the window" in text
    assert "BASE 2 of 20 (91% of its time), NEW 0 of 20 (0%)" in text  # the long steps, named


def test_one_time_cost_leads_when_it_changed_most_with_break_even() -> None:
    """max-autotune on a short job: 30 s of compile in the warm-up, a steady step 5% faster."""
    base = _side([9.5] * 20, warm=[30_000.0, 200.0, 9.5])
    new = _side([10.0] * 20, warm=[1_000.0, 50.0, 10.0])
    c = compare(base, new)
    one, step = c.estimates["one_time"], c.estimates["mean_step"]
    assert one.base == pytest.approx(30.2 - 0.0285 + 0.0095, abs=0.01)
    assert c.decision.headline.quantity == "one_time"
    assert c.verdict.startswith("NEW looks faster: one-time cost")
    assert "steady step is slower" in c.verdict
    # BASE pays ~29 s more up front and saves 0.5 ms a step: level after ~58 000 steps
    be = c.decision.break_even
    assert be is not None and be > 50_000
    assert be == pytest.approx((one.base - one.new) / ((step.new - step.base) / 1e3), abs=1)
    assert f"BASE is ahead after {be} steps" in c.verdict
    assert "break-even: NEW starts" in render_text(c)
    # the user's job is 20 steps: the verdict follows the time to 20 steps
    job = compare(base, new, job_steps=20)
    assert job.decision.headline.quantity == "time_to_n"
    assert job.verdict.startswith("NEW looks faster: time to 20 steps")


def _cost(mean: float, one: float = 1.0) -> RunCost:
    return RunCost(step_ms=np.full(10, mean), startup_s=one, window_mean_ms=mean)


def test_interleaved_rounds_decide_on_per_round_ratios_and_gate() -> None:
    """Load drifts 3x across rounds; within each round NEW is 10% slower. Per-round ratios see
    the 10% through the drift; the gate fails on it and says what it gated on."""
    load = [1.0, 3.0, 1.5, 2.5, 1.2, 2.0, 2.8, 1.1]
    base = [_cost(10.0 * x) for x in load]
    new = [_cost(11.0 * x * (1 + 0.01 * (i % 3))) for i, x in enumerate(load)]
    est = estimates(base, new, paired=True)
    v = decide(est)
    assert v.evidence == "interleaved" and v.decided and v.direction == "slower"
    assert est["mean_step"].speedup.high < 1.0
    assert v.gate(5.0) and not v.gate(20.0)
    assert "gated on 8 interleaved rounds" in v.gate_line(5.0)
    unpaired = decide(estimates(base, new))  # the same numbers as runs: drift swamps it
    assert not unpaired.decided


def test_interleaved_no_change_within_two_percent() -> None:
    load = [1.0, 2.0, 1.5, 3.0, 1.2, 2.2, 1.7, 2.6]
    base = [_cost(10.0 * x) for x in load]
    new = [_cost(10.0 * x * (1.003 if i % 2 else 0.997)) for i, x in enumerate(load)]
    v = decide(estimates(base, new, paired=True))
    assert v.direction == "no change" and v.text.startswith("No change")


def test_folders_of_run_folders_are_several_runs(tmp_path: Path) -> None:
    for i, ms in enumerate([10.0, 10.2, 10.1, 10.3]):
        d = tmp_path / "base" / f"train-{i}"
        d.mkdir(parents=True)
        run = {"steps": {"step_ms": [50.0, *[ms] * 6], "warmup_steps": 1}}
        (d / "run.json").write_text(json.dumps(run))
    (tmp_path / "base" / "notes.txt").write_text("not a run")
    paths = run_paths(str(tmp_path / "base"))
    assert [Path(p).name for p in paths] == ["train-0", "train-1", "train-2", "train-3"]
    runs = load_runs([str(tmp_path / "base")])
    assert len(runs) == 4 and runs[0].step_ms.tolist() == [10.0] * 6
    assert run_paths(paths[0]) == [paths[0]]  # a run folder is one run
