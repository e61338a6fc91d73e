"""Switching a mode for a few extra steps: the interleaved schedule, both arms recorded, the
user's setting restored whatever happens; and the step clock that drives it (probe step,
extra steps, the stop)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from torchdoctor.capture import toggles
from torchdoctor.capture.clock import StepClock, StopScript
from torchdoctor.capture.experiments import PATTERN, Experiments, Toggle
from torchdoctor.capture.options import CheckOptions


def fake_toggle(log: list[str], fid: str = "anomaly-detection", fail: bool = False) -> Toggle:
    def apply() -> None:
        if fail:
            raise RuntimeError("cannot switch")
        log.append(f"{fid}:on")

    return Toggle(fid, "x off", apply, lambda: log.append(f"{fid}:off"))


def test_the_schedule_interleaves_and_restores() -> None:
    log: list[str] = []
    ex = Experiments([fake_toggle(log)])
    assert ex.begin()
    n = 0
    # the warm-up step, then the pattern; each step's arm is set before it runs
    while ex.tick(0.010 if n % 2 else 0.020):
        n += 1
    t = ex.toggles[0]
    assert n + 1 == 1 + len(PATTERN)
    assert len(t.changed_ms) == 4 and len(t.baseline_ms) == 4
    assert log[0] == "anomaly-detection:on" and log[-1] == "anomaly-detection:off"
    r = t.result()
    assert r.ratio == pytest.approx(r.changed_median_ms / r.baseline_median_ms)
    assert len(r.pair_ratios) == 4


def test_a_toggle_that_fails_is_skipped_and_the_next_runs() -> None:
    log: list[str] = []
    ex = Experiments([fake_toggle(log, "a", fail=True), fake_toggle(log, "b")])
    assert ex.begin()
    while ex.tick(0.01):
        pass
    a, b = ex.toggles
    assert a.error is not None and "cannot switch" in a.error and not a.changed_ms
    assert len(b.changed_ms) == 4 and log[-1] == "b:off"
    assert [r.id for r in ex.results()] == ["a", "b"]


def test_abort_restores_the_users_setting() -> None:
    log: list[str] = []
    ex = Experiments([fake_toggle(log)])
    ex.begin()
    ex.abort()
    assert log == ["anomaly-detection:on", "anomaly-detection:off"]


def test_anomaly_off_holds_against_detect_anomaly_in_the_step() -> None:
    torch.autograd.set_detect_anomaly(True)
    try:
        t = toggles.anomaly_off()
        t.apply()
        with pytest.warns(UserWarning), torch.autograd.detect_anomaly():
            assert not torch.is_anomaly_enabled()  # the script's own __enter__ is held off
        t.restore()
        assert torch.is_anomaly_enabled()  # the user's setting is back
    finally:
        torch.autograd.set_detect_anomaly(False)


def test_no_grad_at_a_site_only(tmp_path: Any) -> None:
    from torchdoctor.code_paths import CodePaths

    m = torch.nn.Linear(2, 2)
    here = __file__
    import inspect

    line = inspect.currentframe().f_lineno + 3  # type: ignore[union-attr]
    t = toggles.no_grad_at(CodePaths(), {f"{here}:{line}"})
    t.apply()
    a = m(torch.ones(2))  # the watched line: no graph
    b = m(torch.ones(2))  # another line: grad as usual
    t.restore()
    c = m(torch.ones(2))
    assert t.cleanup is not None
    t.cleanup()
    assert a.grad_fn is None and b.grad_fn is not None and c.grad_fn is not None
    assert torch.is_grad_enabled()


class Listener:
    def __init__(self, extra_steps: int = 0) -> None:
        self.calls: list[tuple[str, int]] = []
        self.extra = extra_steps
        self.clock: StepClock | None = None

    def _log(self, name: str) -> None:
        assert self.clock is not None
        self.calls.append((name, self.clock.steps))

    def window_start(self, warmup: int) -> None:
        self._log("window_start")

    def window_step(self) -> None:
        self._log("window_step")

    def window_end(self) -> None:
        self._log("window_end")

    def window_abort(self) -> None:
        self._log("window_abort")

    def set_measuring(self, on: bool) -> None:
        self._log(f"measuring_{on}")

    def enter(self, window: str) -> None:
        self._log(f"enter_{window}")

    def leave(self, window: str) -> None:
        self._log(f"leave_{window}")

    def experiments_begin(self) -> bool:
        self._log("experiments_begin")
        return self.extra > 0

    def experiment_tick(self, step_s: float) -> bool:
        self._log("experiment_tick")
        self.extra -= 1
        return self.extra > 0


def drive(listener: Listener, options: CheckOptions, limit: int = 50) -> int:
    clock = StepClock(options, listener)
    listener.clock = clock
    clock.begin()
    for _ in range(limit):
        try:
            clock.tick("optimizer")
        except StopScript:
            return clock.steps
    return clock.steps


def test_the_probe_is_the_warm_up_step_before_the_profiler_and_extra_steps_follow() -> None:
    listener = Listener(extra_steps=3)
    stopped_at = drive(listener, CheckOptions(warmup_steps=5, profile_steps=2, clean_steps=0))
    names = [(n, s) for n, s in listener.calls if not n.startswith("window_step")]
    # probe: step 4 (ticks 3 -> 4); the profiler warms up in step 5; measured steps 6-7
    assert ("enter_probe", 3) in names and ("leave_probe", 4) in names
    assert names.index(("leave_probe", 4)) < names.index(("window_start", 4))
    assert ("window_end", 7) in names and ("experiments_begin", 7) in names
    assert [n for n, _ in names].count("experiment_tick") == 3
    assert stopped_at == 10  # 7 measured, then 3 extra steps


def test_no_probe_without_room_and_no_extra_steps_with_full() -> None:
    listener = Listener(extra_steps=3)
    drive(listener, CheckOptions(warmup_steps=1, profile_steps=2, clean_steps=0))
    assert not [n for n, _ in listener.calls if n.startswith("probe")]
    full = Listener(extra_steps=3)
    drive(full, CheckOptions(warmup_steps=3, profile_steps=2, clean_steps=0, full=True), limit=12)
    assert not [n for n, _ in full.calls if n.startswith("experiment")]
