"""Costs in the unit they have: a cost paid once per job or once per epoch is printed as time
of the job (with its break-even), never as a share of a step, and ranks by its share of the job.
Every expected number below is worked out by hand from the record the test writes."""

from __future__ import annotations

import re
from typing import Any

import pytest

from torchdoctor.report.html import _saving
from torchdoctor.report.saving_text import saving_text
from torchdoctor.rules import probe_effect as pe
from torchdoctor.rules.finding import Finding, rank_findings
from torchdoctor.rules.run_rules import run_findings

_PER_STEP = re.compile(r"per step|of a step|of the step")


def _record(step_ms: list[float], mean: float, **parts: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "exit": {"status": "stopped", "code": 0},
        "steps": {
            "source": "optimizer",
            "count": len(step_ms),
            "measured_steps": 5,
            "warmup_steps": 3,
            "step_ms": step_ms,
            "mean_step_ms": mean,
        },
        "compile": {"compiles": 0, "recompiles": 0, "graph_breaks": []},
        "config": {"dataloaders": [], "autocast": [], "grad_scalers": [], "optimizers": []},
        "gpu": None,
        "ops": None,
    }
    rec.update(parts)
    return rec


def _one(rec: dict[str, Any], fid: str) -> Finding:
    (f,) = [f for f in run_findings(rec) if f.id == fid]
    return f


def _never_a_share_of_a_step(f: Finding) -> str:
    text = saving_text(f)
    assert text is not None and not _PER_STEP.search(text), text
    assert not _PER_STEP.search(_saving(f.to_dict())), _saving(f.to_dict())
    assert not _PER_STEP.search(saving_text(f, short=True) or "")
    return text


def test_a_compile_the_job_does_not_repay_is_seconds_of_the_job_with_its_break_even() -> None:
    # 5 s of compile, 20 ms steps, the script says 20 steps: break-even 5000 / 20 = 250 steps;
    # the job as it runs now: 20 x 20 ms + 5000 ms = 5400 ms, of which the compile is 92.6%
    job = {"name": "max_iters", "value": 20, "unit": "steps"}
    rec = _record([20.0] * 15, 20.0, compile={"compiles": 1, "compile_s": 5.0}, job=job)
    f = _one(rec, "compile-not-repaid")
    assert f.cost_unit == "job" and f.one_off_ms == 5000.0 and f.break_even_steps == 250.0
    text = _never_a_share_of_a_step(f)
    assert text.startswith("costs 5.0 s once per job; repaid only by a job of 250 steps or more")
    assert "93% of a job of 20 steps (max_iters = 20)" in text
    # ranked (as before) by what it costs beyond the job's steps, spread over them: (5000 -
    # 20 x 20) / 20 = 230 ms, capped at the 20 ms step
    assert f.saving_ms_per_step == 20.0 and f.spread_steps == 20


def test_a_compile_in_a_job_of_unknown_length_is_its_break_even_alone() -> None:
    rec = _record([20.0] * 15, 20.0, compile={"compiles": 1, "compile_s": 5.0})
    f = _one(rec, "compile-not-repaid")
    assert f.severity == "info" and f.saving_ms_per_step == 0.0
    text = _never_a_share_of_a_step(f)
    assert text == (
        "costs 5.0 s once per job; repaid only by a job of 250 steps or more; job length unknown"
    )


def test_an_evaluation_at_iteration_0_is_a_cost_of_the_job() -> None:
    """minGPT's adder: the callback evaluates at iteration 0 (in the second step by the
    optimizer's boundaries), about a second against 10 ms steps; the script runs 40 steps."""
    times = [100.0, 1010.0] + [10.0] * 20
    job = {"name": "config.trainer.max_iters", "value": 40, "unit": "steps"}
    f = _one(_record(times, 50.0, job=job), "rare-long-steps")
    # excess over the 10 ms median: 1000 ms, once; spread over 40 steps: 25 ms of a 50 ms step
    assert f.cost_unit == "job" and f.one_off_ms == 1000.0
    assert f.saving_ms_per_step == 25.0 and f.share_of_step == 0.5
    assert "at the start of the run (paid once per job)" in f.title
    assert "per step on average" not in f.title
    text = _never_a_share_of_a_step(f)
    # the job: 40 x 50 ms + 1000 ms = 3000 ms, a third of it the evaluation
    assert text == (
        "costs 1.0 s once per job; 33% of a job of 40 steps (config.trainer.max_iters = 40)"
    )


def test_a_busy_machines_spike_beside_the_start_up_step_leaves_it_a_cost_of_the_job() -> None:
    # step 2 runs 1000 ms over the 10 ms median; step 12 a 60 ms spike (50 ms over): the start
    # holds 1000 / 1050 = 95% of the excess (>= 90%): a cost of the job, of 1000 ms alone
    times = [100.0, 1010.0] + [10.0] * 9 + [60.0] + [10.0] * 10
    job = {"name": "max_iters", "value": 40, "unit": "steps"}
    f = _one(_record(times, 50.0, job=job), "rare-long-steps")
    assert f.cost_unit == "job" and f.one_off_ms == 1000.0 and "2 of 21 steps" in f.title
    assert "step 2 took 1010.0 ms against a 10.0 ms median" in f.title
    # a spike of 200 ms over instead: 1000 / 1200 = 83%, below 90%: a per-step cost
    times[11] = 210.0
    assert _one(_record(times, 50.0, job=job), "rare-long-steps").cost_unit == "step"


def test_a_long_step_later_in_the_run_stays_a_per_step_cost() -> None:
    times = [100.0] + [10.0] * 9 + [1010.0] + [10.0] * 9
    f = _one(_record(times, 60.0), "rare-long-steps")
    assert f.cost_unit == "step" and f.one_off_ms is None
    # its 1000 ms excess over the 19 steps considered (the first never is): 52.63 of 60 ms
    assert f.saving_ms_per_step == pytest.approx(1000.0 / 19, abs=1e-4)
    assert saving_text(f) == "saves up to 52.63 ms per step (88%)"


def test_an_epoch_restart_is_a_cost_of_each_epoch() -> None:
    # 160 samples in batches of 16: 10 batches per epoch; steps 11 and 21 (0-based 10 and 20)
    # start an epoch and take 210 ms against a 10 ms median: 200 ms per epoch
    loader = {"num_workers": 2, "batch_size": 16, "dataset_len": 160, "pin_memory": False}
    times = [100.0] + [10.0] * 9 + [210.0] + [10.0] * 9 + [210.0] + [10.0] * 5
    rec = _record(times, 20.0, config={"dataloaders": [loader]})
    f = _one(rec, "rare-long-steps")
    assert f.cost_unit == "epoch" and f.one_off_ms == 200.0 and f.spread_steps == 10
    assert "each the first of an epoch of 10 batches" in f.title
    assert "persistent_workers=True" in f.fix
    assert f.saving_ms_per_step == 20.0  # 200 ms spread over the epoch's 10 steps
    # an epoch now: 10 steps of 20 ms + 200 ms = 400 ms, half of it the restart
    assert _never_a_share_of_a_step(f) == "costs 0.20 s once per epoch (50% of a 0.40 s epoch)"


def test_warm_up_recompiles_are_a_cost_of_the_job() -> None:
    compiled = {"recompiles": 1, "recompile_s": 100.0, "recompile_events": []}
    done = _record([20.0] * 15, 20.0, compile=compiled, exit={"status": "completed", "code": 0})
    f = _one(done, "recompiles")
    assert f.cost_unit == "job" and f.one_off_ms == 100_000.0 and f.spread_steps == 15
    text = _never_a_share_of_a_step(f)
    # 15 steps of 20 ms and 100 s of recompiles: 100 / 100.3 of the job
    assert text == "costs 100 s once per job; 100% of a job of 15 steps (15 steps run)"


def test_an_unknown_job_length_ranks_a_one_off_as_spread_over_the_assumed_job() -> None:
    times = [100.0, 1010.0] + [10.0] * 20
    one_off = _one(_record(times, 10.0), "rare-long-steps")
    # 1000 ms over the assumed 1000 steps: 1 ms per step
    assert one_off.spread_steps == 1000 and one_off.saving_ms_per_step == 1.0
    assert "job length unknown" in (saving_text(one_off) or "")
    per_step = Finding(
        id="gc-in-step",
        title="gc",
        severity="info",
        saving_ms_per_step=1.5,
        share_of_step=0.15,
        evidence={},
        fix="#",
    )
    assert [f.id for f in rank_findings([one_off, per_step])] == ["gc-in-step", "rare-long-steps"]


def test_a_one_off_cost_is_not_scaled_to_the_clean_step() -> None:
    compiled = {"recompiles": 1, "recompile_s": 3.0, "recompile_events": []}
    rec = _record([20.0] * 15, 20.0, compile=compiled, exit={"status": "completed", "code": 0})
    f = _one(rec, "recompiles")
    rec["steps"].update(
        window=[11, 15], clean={"first_step": 4, "steps": 6, "clock": "host", "step_ms": [5.0] * 6}
    )
    effect = pe.measure(rec)
    assert effect is not None
    (kept,), _ = pe.apply([f], effect, rec)
    # 3000 ms over 15 steps, capped at the 20 ms step; the clean step (5 ms) would scale it
    assert kept.saving_ms_per_step == f.saving_ms_per_step == 20.0
    assert kept.one_off_ms == 3000.0


def test_a_finding_refuses_an_unknown_unit_or_a_one_off_without_its_cost() -> None:
    base: dict[str, Any] = dict(
        id="gc-in-step", title="t", severity="info", saving_ms_per_step=0.0, share_of_step=0.0,
        evidence={}, fix="#",
    )  # fmt: skip
    with pytest.raises(ValueError, match="cost unit"):
        Finding(**base, cost_unit="hour")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one_off_ms"):
        Finding(**base, cost_unit="job")


def test_the_job_length_is_read_from_a_config_section() -> None:
    from types import SimpleNamespace

    from torchdoctor.capture.job_length import job_length

    # minGPT's adder: config.trainer.max_iters, with the trainer's default (None) beside it
    config = SimpleNamespace(system=SimpleNamespace(seed=3), trainer=SimpleNamespace(max_iters=40))
    assert job_length({"config": config}) == {
        "name": "config.trainer.max_iters",
        "value": 40,
        "unit": "steps",
    }
    # a top-level count comes first; nothing named: None
    assert job_length({"config": config, "max_iters": 7})["value"] == 7  # type: ignore[index]
    assert job_length({"config": SimpleNamespace(trainer=SimpleNamespace(max_iters=None))}) is None


def test_checks_run_level_summary_gives_a_one_off_cost_in_seconds_of_the_job() -> None:
    from torchdoctor.commands.check.summary import _findings_text

    job = {"name": "max_iters", "value": 20, "unit": "steps"}
    rec = _record([20.0] * 15, 20.0, compile={"compiles": 1, "compile_s": 5.0}, job=job)
    text = _findings_text([_one(rec, "compile-not-repaid").to_dict()])
    assert "(costs 5.0 s once per job; repaid only by a job of 250 steps or more" in text
    assert "ms/step" not in text
