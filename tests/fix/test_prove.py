"""The prove step's decisions on fake runs (no process is started): interleaving, the interval
against --min-gain, the loss gate, failures, --keep-unproven."""

from __future__ import annotations

import random
import textwrap
from pathlib import Path
from typing import Any

import pytest

from torchdoctor.ab.child import Arm, ChildExit
from torchdoctor.capture import script_arm
from torchdoctor.fix import planner, prove
from torchdoctor.fix.context import FixContext
from torchdoctor.fix.model import FindingRef
from torchdoctor.fix.prove import ArmRun, ProveOptions
from torchdoctor.record.run import RunRecord

SCRIPT = """
import torch
from torch.utils.data import DataLoader

torch.autograd.set_detect_anomaly(True)
loader = DataLoader(ds, batch_size=8)
total = 0.0
for i, (x, y) in enumerate(loader):
    loss = model(x)
    loss.backward()
    total += loss.item()
print(total)
"""
LOSSES = [2.0 - 0.01 * i for i in range(10)]


@pytest.fixture
def plan(tmp_path: Path) -> planner.Plan:
    p = tmp_path / "train.py"
    p.write_text(textwrap.dedent(SCRIPT).lstrip())
    raw = {"num_workers": 0, "cpus_per_rank": 2, "call": {"site": f"{p}:5"}}
    fs = [
        FindingRef(
            "dataloader-config",
            saving_ms_per_step=9.0,
            evidence={"mean_step_ms": 10.0, "dataloader": raw, "suggested_num_workers": 2},
        ),
        FindingRef("anomaly-detection"),
        FindingRef("host-syncs-in-step", evidence={"sites": [{"site": f"{p}:10"}]}),
    ]
    result = planner.plan(fs, FixContext(RunRecord.from_dict({}), str(tmp_path), str(p)))
    assert [c.status for c in result.changes] == ["patched"] * 3
    return result


def fake_runs(behaviour: dict[str, Any], calls: list[str]) -> Any:
    """A run_arm stand-in: arm label -> (step ms, losses) or an exception text."""
    jitter = random.Random(0)

    def run_arm(arm: Arm, opts: ProveOptions) -> ArmRun:
        calls.append(arm.name)
        b = behaviour.get(arm.name, behaviour["default"])
        if isinstance(b, str):
            return ArmRun(False, error=b)
        ms, losses = b
        return ArmRun(True, [ms * (1 + 0.03 * jitter.random()) for _ in range(5)], list(losses))

    return run_arm


def test_decisions(plan: planner.Plan, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    behaviour = {
        "original": (10.0, LOSSES),
        "c1": (5.0, LOSSES),  # 2x faster, same losses
        "c2": (10.0, LOSSES),  # no faster
        "c3": "RuntimeError: the patched script broke",
        "all": (5.0, LOSSES),
        "default": (10.0, LOSSES),
    }
    monkeypatch.setattr(prove, "run_arm", fake_runs(behaviour, calls))
    proof = prove.prove(plan, next(iter(plan.originals)), [], ProveOptions(rounds=6, min_gain=0.1))
    c1, c2, c3 = proof.plan.changes
    assert c1.status == "patched" and c1.measured is not None
    assert 1.9 < c1.measured.ratio < 2.1 and c1.measured.low > 1.1 and c1.measured.rounds == 6
    assert c1.fidelity is not None and c1.fidelity.ok and c1.fidelity.steps == 10
    assert c2.status == "no-gain" and "does not clear 1.10x" in c2.reason
    assert c3.status == "failed" and "the patched script broke" in c3.reason
    assert calls.count("c3") == 1 and calls.count("original") == 6
    assert proof.together is not None and proof.together_ids == ("c1", "c2", "c3")
    assert [c.id for c in proof.plan.patched] == ["c1"]


def test_too_few_rounds_say_so_instead_of_does_not_clear(
    plan: planner.Plan, monkeypatch: pytest.MonkeyPatch
) -> None:
    behaviour = {"original": (10.0, LOSSES), "c1": (3.75, LOSSES), "default": (10.0, LOSSES)}
    monkeypatch.setattr(prove, "run_arm", fake_runs(behaviour, []))
    proof = prove.prove(plan, next(iter(plan.originals)), [], ProveOptions(rounds=4))
    c1 = proof.plan.changes[0]  # a 2.67x gain over 4 rounds: no 95% interval exists
    assert c1.status == "no-gain" and "does not clear" not in c1.reason
    assert c1.reason.startswith("4 rounds cannot give a 95% interval; run --rounds 6 or more")
    assert "measured 2.6" in c1.reason or "measured 2.7" in c1.reason
    # with 6 rounds the same gain is proven
    proof6 = prove.prove(plan, next(iter(plan.originals)), [], ProveOptions(rounds=6))
    assert proof6.plan.changes[0].status == "patched"


def test_changed_losses_are_rejected_with_the_numbers(
    plan: planner.Plan, monkeypatch: pytest.MonkeyPatch
) -> None:
    drifted = [x * (1.0 + 0.01 * i) for i, x in enumerate(LOSSES)]
    behaviour = {"original": (10.0, LOSSES), "c1": (5.0, drifted), "default": (5.0, LOSSES)}
    monkeypatch.setattr(prove, "run_arm", fake_runs(behaviour, []))
    proof = prove.prove(plan, next(iter(plan.originals)), [], ProveOptions(rounds=6))
    c1 = proof.plan.changes[0]
    assert c1.status == "rejected"
    assert "loss deviates 9.00e-02 from the original at step 9" in c1.reason
    assert "tolerance for fp32: 1e-03" in c1.reason
    assert [c.id for c in proof.plan.patched] == ["c2", "c3"]


def test_keep_unproven_keeps_a_change_without_gain(
    plan: planner.Plan, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prove, "run_arm", fake_runs({"default": (10.0, LOSSES)}, []))
    proof = prove.prove(
        plan, next(iter(plan.originals)), [], ProveOptions(rounds=6, keep_unproven=True)
    )
    assert all(
        c.status == "patched" and "kept (--keep-unproven)" in c.reason for c in proof.plan.changes
    )


def test_an_original_that_is_not_reproducible_rejects(
    plan: planner.Plan, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    inner = fake_runs({"default": (5.0, LOSSES)}, calls)
    seen = {"n": 0}

    def run_arm(arm: Arm, opts: ProveOptions) -> ArmRun:
        r = inner(arm, opts)
        if arm.name == "original":
            seen["n"] += 1
            r.losses = [x + 0.1 * seen["n"] for x in LOSSES]  # differs from run to run
        return r

    monkeypatch.setattr(prove, "run_arm", run_arm)
    proof = prove.prove(plan, next(iter(plan.originals)), [], ProveOptions(rounds=6))
    assert all(
        c.status == "rejected" and "not reproducible" in c.reason for c in proof.plan.changes
    )


def test_an_original_that_does_not_run_fails_every_change(
    plan: planner.Plan, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        prove, "run_arm", fake_runs({"original": "ImportError: no data", "default": (1.0, [])}, [])
    )
    proof = prove.prove(plan, next(iter(plan.originals)), [], ProveOptions(rounds=6))
    assert all(
        c.status == "failed" and "the original did not run" in c.reason for c in proof.plan.changes
    )


def test_no_loss_recorded_is_said_not_hidden() -> None:
    f = prove.fidelity([ArmRun(True, [1.0])], [ArmRun(True, [1.0])], "fp32")
    assert f.ok and f.steps == 0 and "not compared" in f.reason


def test_options_are_validated() -> None:
    from torchdoctor.errors import UserError

    with pytest.raises(UserError):
        ProveOptions(rounds=1)
    with pytest.raises(UserError):
        ProveOptions(min_gain=-0.1)


def test_a_longer_warm_up_is_reported_apart_from_the_ratio() -> None:
    from torchdoctor.fix.render import measured_text

    base = [ArmRun(True, [10.0, 10.0], warmup_s=0.2) for _ in range(6)]
    arm = [ArmRun(True, [5.0, 5.0], warmup_s=12.2) for _ in range(6)]
    m = prove.measured(base, arm, 0.02)
    assert (
        m is not None and m.ratio == pytest.approx(2.0) and m.warmup_extra_s == pytest.approx(12.0)
    )
    assert "+12.0 s once, in the warm-up (not in the ratio)" in measured_text(m)


def test_an_arm_on_a_gpu_is_timed_by_its_cuda_events(tmp_path: Path) -> None:
    opts = ProveOptions(warmup=2, steps=3)
    r = {
        "status": "stopped",
        "warmup": 2,
        "step_ms": [900.0, 50.0, 1.0, 30.0, 2.0],  # the host's: a sync lands in one step
        "timed": {"clock": "cuda-events", "step_ms": [11.0, 11.0, 11.0]},
    }
    run = prove._result(_read(r), opts)
    assert run.ok and run.step_ms == pytest.approx([11.0, 11.0, 11.0])
    assert run.warmup_s == pytest.approx(0.95)
    cpu = {**r, "timed": {"clock": "host", "step_ms": [1.0]}}
    assert prove._result(_read(cpu), opts).step_ms == [1.0, 30.0, 2.0]


def _read(doc: dict[str, Any]) -> script_arm.ArmResult:
    return script_arm.read(ChildExit("result", 0, doc, "", 0.0, 1.0))


SHORT = {"status": "completed", "code": 0, "warmup": 3, "step_ms": [400.0], "losses": [2.0]}
FAILED = {"status": "error", "code": 1, "exception": "ValueError: bad shape", "step_ms": [1.0]}


@pytest.mark.parametrize(
    ("got", "why"),
    [
        (
            ChildExit("result", 0, SHORT, "", 0.0, 1.0),
            "ran 1 steps, fewer than --warmup 3 + 1 (no optimizer step, DataLoader batch or "
            "torchdoctor.step() marker seen?) (the script completed, status 0)",
        ),
        (
            ChildExit("result", 1, FAILED, "Traceback\nValueError: bad shape\n", 0.0, 1.0),
            "failed (the script error, status 1: ValueError: bad shape)",
        ),
        (
            ChildExit("result", 0, {**FAILED, "exception": None}, "a\nb\nc\nd\n", 0.0, 1.0),
            "failed (the script error, status 1: b | c | d)",
        ),
        (
            ChildExit("signal", -9, None, "loading\n", 0.0, 1.0, "killed by SIGKILL"),
            "killed by SIGKILL: loading",
        ),
        (
            ChildExit("timeout", -1, None, "", 0.0, 9.0, "no result after 9 s"),
            "no result after 9 s",
        ),
    ],
)
def test_fix_and_compare_read_a_child_without_steps_alike(got: ChildExit, why: str) -> None:
    from torchdoctor.compare.rerun_process import cost_of

    arm = script_arm.read(got)
    run = prove._result(arm, ProveOptions(warmup=3, steps=5))
    assert not run.ok and run.error == why
    assert cost_of(arm, 5) == (None, why)


def test_a_run_that_ended_early_keeps_its_steps_after_the_warm_up() -> None:
    # the script ended by itself after 5 steps: no window marks, no GPU clock; its losses kept
    doc = {**SHORT, "step_ms": [400.0, 300.0, 200.0, 12.0, 14.0], "losses": [2.0, 1.9]}
    arm = _read(doc)
    split, why = arm.split(10)
    assert split is not None and why == "" and split.window_mean_ms is None
    assert split.warmup_ms == (400.0, 300.0, 200.0) and split.measured_ms == (12.0, 14.0)
    run = prove._result(arm, ProveOptions(warmup=3, steps=10))
    assert run.ok and run.mean_ms == 13.0 and run.losses == [2.0, 1.9]
