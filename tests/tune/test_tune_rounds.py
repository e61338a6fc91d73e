"""Interleaved rounds inside a trial: shuffled order, one sync per window (CUDA events mocked),
losses read once per window, early stop once the interval decides."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from torchdoctor.capture.config_probe import backend_flags
from torchdoctor.tune import rounds as rounds_mod
from torchdoctor.tune.rounds import RoundPlan, TrainingArm, WindowClock, run_rounds


class FakeTime:
    """A host clock the fake loops advance by their step cost (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeLoop:
    """A training loop whose step costs ``cost_s`` on the fake clock and returns a loss tensor."""

    def __init__(self, clock: FakeTime, cost_s: float, log: list[str], name: str) -> None:
        self.clock, self.cost_s, self.log, self.name = clock, cost_s, log, name
        self.wait_s = 0.0
        self.steps = 0

    def step(self) -> torch.Tensor:
        self.clock.now += self.cost_s
        self.steps += 1
        self.log.append(self.name)
        return torch.tensor(1.0 / self.steps)


def _arms(
    monkeypatch: pytest.MonkeyPatch, costs: dict[str, float]
) -> tuple[list[TrainingArm], list[str]]:
    clock, log = FakeTime(), []
    monkeypatch.setattr(rounds_mod.time, "perf_counter", clock)
    arms = [
        TrainingArm(label, FakeLoop(clock, c, log, label), backend_flags())
        for label, c in costs.items()
    ]
    return arms, log


def _plan(max_rounds: int = 20) -> RoundPlan:
    return RoundPlan(steps=4, min_rounds=6, max_rounds=max_rounds, max_s=1e9, min_gain=0.02, seed=3)


def test_clear_win_stops_at_six_rounds_in_shuffled_order(monkeypatch: pytest.MonkeyPatch) -> None:
    arms, log = _arms(monkeypatch, {"candidate": 0.008, "baseline": 0.010})
    assert run_rounds(arms, _plan(), WindowClock(torch.device("cpu"))) is None
    cand, base = arms
    assert len(cand.window_steps_s) == len(base.window_steps_s) == 6
    assert cand.window_steps_s == pytest.approx([0.008] * 6)
    # Windows are whole: 4 steps of one arm, then 4 of the other; the order varies by round.
    firsts = [log[i] for i in range(0, len(log), 8)]
    assert set(firsts) == {"candidate", "baseline"}
    assert all(len(set(log[i : i + 4])) == 1 for i in range(0, len(log), 4))
    assert len(cand.losses) == 24 and cand.losses[:2] == pytest.approx([1.0, 0.5])


def test_no_gain_is_dropped_and_a_close_call_runs_to_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    same, _ = _arms(monkeypatch, {"candidate": 0.010, "baseline": 0.010})
    run_rounds(same, _plan(), WindowClock(torch.device("cpu")))
    assert len(same[0].window_steps_s) == 6  # dropped: the interval is below 1.02

    close, _ = _arms(monkeypatch, {"candidate": 0.010, "baseline": 0.010})
    close[1].loop.cost_s = 0.0102  # exactly 1.02x: neither wholly above nor below
    flip = iter([0.0101, 0.0103] * 20)

    def wobble(self: Any, steps: int, clock: WindowClock) -> float:
        self.loop.cost_s = next(flip) if self.label == "baseline" else self.loop.cost_s
        return original(self, steps, clock)

    original = TrainingArm.window
    monkeypatch.setattr(TrainingArm, "window", wobble)
    run_rounds(close, _plan(max_rounds=9), WindowClock(torch.device("cpu")))
    assert len(close[0].window_steps_s) == 9


def test_incumbent_is_the_reference_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    # 25% faster than the baseline, 1% slower than the incumbent: not a win, dropped at 6.
    arms, _ = _arms(monkeypatch, {"candidate": 0.008, "incumbent": 0.0079, "baseline": 0.010})
    run_rounds(arms, _plan(), WindowClock(torch.device("cpu")))
    assert len(arms[0].window_steps_s) == 6 and len(arms[2].window_steps_s) == 6


def test_nonfinite_loss_stops_the_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    arms, _ = _arms(monkeypatch, {"candidate": 0.01, "baseline": 0.01})
    arms[0].loop.step = lambda: torch.tensor(float("nan"))  # type: ignore[method-assign]
    assert run_rounds(arms, _plan(), WindowClock(torch.device("cpu"))) == "nonfinite"
    assert arms[0].nonfinite_step() == 0


class FakeEvent:
    """Stands in for torch.cuda.Event: a timestamp per record, a counted synchronize."""

    syncs = 0
    clock: FakeTime

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t: float | None = None

    def record(self, stream: Any = None) -> None:
        self.t = FakeEvent.clock.now

    def synchronize(self) -> None:
        FakeEvent.syncs += 1

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.t is not None and end.t is not None
        return (end.t - self.t) * 1e3  # milliseconds, like CUDA


def test_cuda_windows_use_events_and_sync_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    arms, _ = _arms(monkeypatch, {"candidate": 0.008, "baseline": 0.010})
    FakeEvent.clock, FakeEvent.syncs = arms[0].loop.clock, 0
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: pytest.fail("a global sync"))
    monkeypatch.setattr(
        rounds_mod.time, "perf_counter", lambda: pytest.fail("host clock used on CUDA")
    )
    run_rounds(arms, _plan(), WindowClock(torch.device("cuda", 0)))
    windows = sum(len(a.window_steps_s) for a in arms)
    assert windows == 12 and FakeEvent.syncs == windows  # one sync per window, not per step
    assert arms[0].window_steps_s == pytest.approx([0.008] * 6)


def test_each_arm_draws_its_own_random_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropout in an arm sees the stream it would see alone, however the rounds interleave."""
    arms, _ = _arms(monkeypatch, {"candidate": 0.008, "baseline": 0.010})
    for arm in arms:
        torch.manual_seed(7)
        arm.rng = rounds_mod.rng_state()  # both built from the same seed, as the worker does
        loop = arm.loop

        def step(loop: FakeLoop = loop) -> torch.Tensor:
            loop.clock.now += loop.cost_s
            return torch.rand(())

        loop.step = step  # type: ignore[method-assign]
    run_rounds(arms, _plan(), WindowClock(torch.device("cpu")))
    torch.manual_seed(7)
    alone = [float(torch.rand(())) for _ in range(24)]
    assert arms[0].losses == pytest.approx(alone) and arms[1].losses == pytest.approx(alone)
