"""Real trial processes on a tiny workload: a result, and each failure recorded with its reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchdoctor.tune.options import TuneOptions
from torchdoctor.tune.runner import TrialRunner
from torchdoctor.tune.space import BASELINE, assignment_key
from torchdoctor.tune.trial import Trial, TrialResult
from torchdoctor.tune.worker import classify

TINY = str(Path(__file__).parent / "workloads" / "tiny.py")


def run(
    mode: str = "",
    *,
    phase: str = "single",
    timeout_s: float = 60.0,
    workdir: str | None = None,
    reference: dict[str, object] | None = None,
    max_rounds: int = 6,
    **knobs: object,
) -> TrialResult:
    a = {**BASELINE, **knobs}
    runner = TrialRunner(
        TINY,
        TuneOptions(warmup=2, steps=5, trial_timeout=str(timeout_s), max_rounds=max_rounds),
        batch_size=16,
        workdir=workdir,
        env={"TD_TUNE_TEST_MODE": mode},
    )
    ref = None if reference is None else {**BASELINE, **reference}
    return runner(Trial(assignment_key(a), phase, a, reference=ref))  # type: ignore[arg-type]


@pytest.mark.slow
def test_ok_trial_reports_times_losses_and_probe(tmp_path: Path) -> None:
    r = run(phase="baseline", workdir=str(tmp_path))
    assert r.status == "ok", r.reason
    # One arm: the minimum 6 rounds of one 5-step window; the losses of every step, read back.
    assert len(r.step_times_s) == 6 and len(r.warmup_times_s) == 2 and len(r.losses) == 32
    assert r.rounds_s == {"candidate": r.step_times_s} and r.window_steps == 5
    assert all(0 < x < 100 for x in r.losses) and len(set(r.losses)) == 32
    assert r.probe is not None and r.probe["batch_size"] == 16 and r.probe["device"] == "cpu"
    assert "fused" in r.probe["optimizer_impls"] or "foreach" in r.probe["optimizer_impls"]
    assert r.peak_bytes and r.peak_bytes > 0 and r.wall_s > 0 and r.steps_per_epoch == 16
    # The analyser reads the baseline's trace: whatever it finds is a known finding id.
    from torchdoctor.rules.finding import FINDING_IDS
    from torchdoctor.tune.diagnosis import diagnose

    assert set(diagnose(r)) <= set(FINDING_IDS)
    assert (
        r.trace_path == str(tmp_path / "baseline-trace.json")
        and Path(r.trace_path).stat().st_size > 1000
    )


@pytest.mark.slow
def test_accumulation_keeps_the_trajectory() -> None:
    whole, halves = run(), run(grad_accumulation=2)
    assert whole.status == halves.status == "ok"
    assert halves.losses == pytest.approx(whole.losses, rel=1e-5)


@pytest.mark.slow
def test_arms_run_interleaved_in_one_process() -> None:
    """Candidate, incumbent and baseline train side by side, one window each per round, each
    from the same seed: the incumbent's and the baseline's numbers never mix with the candidate's."""
    r = run(reference={"optimizer_impl": "foreach"}, max_rounds=8, grad_accumulation=2)
    assert r.status == "ok", r.reason
    assert set(r.rounds_s) == {"candidate", "incumbent", "baseline"}
    n = len(r.rounds_s["candidate"])
    assert 6 <= n <= 8 and all(len(v) == n for v in r.rounds_s.values())
    assert r.step_times_s == r.rounds_s["candidate"] and len(r.losses) == 2 + 5 * n
    base = run()  # the baseline alone: its trajectory is the candidate's (accumulation only)
    assert r.losses[:32] == pytest.approx(base.losses, rel=1e-5)


@pytest.mark.parametrize(
    ("mode", "status", "reason"),
    [
        ("oom", "oom", "can't allocate memory"),
        ("nan", "nonfinite", "loss is nan at step 0"),
        ("crash", "crash", "SIGSEGV"),
        ("error", "error", "ValueError: the workload broke"),
    ],
)
@pytest.mark.slow
def test_failures_are_classified(mode: str, status: str, reason: str) -> None:
    r = run(mode)
    assert r.status == status and reason in r.reason


@pytest.mark.slow
def test_hang_is_killed_at_the_timeout() -> None:
    r = run("hang", timeout_s=6.0)
    assert r.status == "timeout" and "6 s" in r.reason
    assert r.wall_s < 30


def test_compile_errors_are_told_apart() -> None:
    import torch._dynamo.exc

    assert classify(torch._dynamo.exc.TorchDynamoException("boom")).status == "compile-error"
    assert classify(torch.OutOfMemoryError("CUDA out of memory")).status == "oom"
    assert classify(KeyError("x")).status == "error"


@pytest.mark.slow
def test_distributed_trial_under_torchrun(tmp_path: Path) -> None:
    a = {**BASELINE, "ddp_bucket_cap_mb": 5.0}
    runner = TrialRunner(
        TINY,
        TuneOptions(warmup=2, steps=6, trial_timeout="180", nproc=2, max_rounds=6),
        batch_size=16,
        workdir=str(tmp_path),
    )
    r = runner(Trial(assignment_key(a), "baseline", a))
    assert r.status == "ok", r.reason
    assert r.probe is not None and r.probe["world_size"] == 2 and r.probe["backend"] == "runtime"
    assert len(r.step_times_s) == 6 and len(r.losses) == 2 + 6 * 6


def test_the_baseline_trace_path_is_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker imports the workload, which may change its working directory: a relative
    ``workdir`` (the tune database's folder) would put the baseline's trace elsewhere."""
    monkeypatch.chdir(tmp_path)
    a = dict(BASELINE)
    spec = TrialRunner(TINY, workdir="run-1").spec(Trial(assignment_key(a), "baseline", a))
    assert spec["trace_path"] == str(tmp_path / "run-1" / "baseline-trace.json")
