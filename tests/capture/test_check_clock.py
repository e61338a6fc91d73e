"""The step clock: which signal counts, when the window opens and closes, what a step costs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchdoctor.capture.clock import StepClock, StopScript
from torchdoctor.capture.options import CheckOptions
from torchdoctor.errors import UserError


class Recorder:
    def __init__(self, fail_on: str | None = None) -> None:
        self.events: list[tuple[str, object]] = []
        self.fail_on = fail_on
        self.tick = 0

    def _log(self, name: str, arg: object = None) -> None:
        self.events.append((name, arg))
        if name == self.fail_on:
            raise RuntimeError("boom")

    def window_start(self, warmup: int) -> None:
        self._log("start", warmup)

    def window_step(self) -> None:
        self._log("step")

    def window_end(self) -> None:
        self._log("end")

    def window_abort(self) -> None:
        self._log("abort")

    def set_measuring(self, on: bool) -> None:
        self._log("measuring", on)


def _drive(clock: StepClock, rec: Recorder, source: str, n: int) -> list[list[tuple[str, object]]]:
    """Tick n times; the events each tick produced."""
    per_tick = []
    for _ in range(n):
        before = len(rec.events)
        try:
            clock.tick(source)
        except StopScript:
            per_tick.append([*rec.events[before:], ("STOP", None)])
            break
        per_tick.append(rec.events[before:])
    return per_tick


def test_default_schedule_trajectory() -> None:
    rec = Recorder()
    clock = StepClock(CheckOptions(warmup_steps=3, profile_steps=2, clean_steps=0), rec)
    clock.begin()
    ticks = _drive(clock, rec, "optimizer", 10)
    assert ticks == [
        [],
        [("start", 1)],  # the profiler's own warm-up step is step 3
        [("measuring", True), ("step", None)],
        [("step", None)],
        [("step", None), ("end", None), ("STOP", None)],
    ]
    assert clock.steps == 5 and clock.window_steps == (4, 5)


def test_full_keeps_running_and_goes_quiet() -> None:
    rec = Recorder()
    clock = StepClock(CheckOptions(warmup_steps=2, profile_steps=1, clean_steps=0, full=True), rec)
    clock.begin()
    ticks = _drive(clock, rec, "optimizer", 8)
    assert len(ticks) == 8 and all(t == [] for t in ticks[3:])
    assert [e[0] for e in rec.events] == ["start", "measuring", "step", "step", "end"]


def test_zero_warmup_opens_at_begin() -> None:
    rec = Recorder()
    clock = StepClock(CheckOptions(warmup_steps=0, profile_steps=2, clean_steps=0), rec)
    clock.begin()
    assert rec.events == [("start", 0), ("measuring", True)]
    ticks = _drive(clock, rec, "marker", 5)
    assert ticks == [[("step", None)], [("step", None), ("end", None), ("STOP", None)]]


def test_stronger_signal_restarts_counting() -> None:
    rec = Recorder()
    clock = StepClock(CheckOptions(warmup_steps=2, profile_steps=3, clean_steps=0), rec)
    clock.begin()
    _drive(clock, rec, "dataloader", 2)  # window opened on batches
    assert clock.source == "dataloader" and ("start", 1) in rec.events
    clock.tick("optimizer")
    # The window was discarded inside this optimizer hook: nothing opens in the same hook (the
    # profiler range torch opened around optimizer.step would end in another session and
    # crash), and this partial step is not counted.
    assert clock.source == "optimizer" and clock.steps == 0
    assert rec.events[-2:] == [("abort", None), ("measuring", False)] and clock.switches
    clock.tick("dataloader")  # weaker signal: ignored from now on
    assert clock.steps == 0
    clock.tick("optimizer")
    assert clock.steps == 1 and rec.events[-1] == ("start", 1)  # opened at the next signal


def test_step_times_and_data_wait() -> None:
    clock = StepClock(CheckOptions(warmup_steps=50, profile_steps=1, clean_steps=0), Recorder())
    clock.begin()
    time.sleep(0.02)  # the first step starts with the script, not at its first signal
    clock.add_wait(0.005)
    clock.tick("optimizer")
    clock.tick("optimizer")
    assert clock.step_s[0] >= 0.02 > clock.step_s[1]
    assert list(clock.data_wait_s) == [0.005, 0.0]


def test_listener_failure_never_reaches_the_script() -> None:
    rec = Recorder(fail_on="start")
    clock = StepClock(CheckOptions(warmup_steps=2, profile_steps=1, clean_steps=0, full=True), rec)
    clock.begin()
    _drive(clock, rec, "optimizer", 4)
    assert clock.errors and "boom" in clock.errors[0]


@pytest.mark.parametrize(
    "kwargs", [{"warmup_steps": -1}, {"profile_steps": 0}, {"rank_timeout_s": -1.0}]
)
def test_options_validate(kwargs: dict[str, object]) -> None:
    with pytest.raises(UserError):
        CheckOptions(**kwargs)  # type: ignore[arg-type]


@pytest.mark.slow
def test_only_the_first_optimizer_counts(tmp_path: object) -> None:
    import torch

    from torchdoctor.capture.hooks import StepHooks

    clock = StepClock(CheckOptions(warmup_steps=100, profile_steps=1, clean_steps=0), Recorder())
    hooks = StepHooks(clock)
    hooks.install()
    try:
        gen, disc = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
        opt_g = torch.optim.SGD(gen.parameters(), lr=0.1)
        opt_d = torch.optim.SGD(disc.parameters(), lr=0.1)
        for _ in range(3):  # a GAN iteration steps both
            opt_d.step()
            opt_g.step()
        assert clock.steps == 3 and hooks.optimizer_steps == 6
        del opt_d  # the counted optimizer is gone: the next one takes over
        import gc

        gc.collect()
        opt_g.step()
        assert clock.steps == 4
    finally:
        hooks.uninstall()


@given(
    warmup=st.integers(0, 6),
    clean=st.integers(0, 5),
    profile=st.integers(1, 4),
    full=st.booleans(),
    sources=st.lists(st.sampled_from(["dataloader", "optimizer", "marker"]), max_size=40),
)
@settings(max_examples=200, deadline=None)
def test_schedule_invariants(
    warmup: int, clean: int, profile: int, full: bool, sources: list[str]
) -> None:
    rec = Recorder()
    options = CheckOptions(warmup_steps=warmup, clean_steps=clean, profile_steps=profile, full=full)
    sched = options.schedule
    clock = StepClock(options, rec)
    clock.begin()
    stopped = False
    for source in sources:
        try:
            clock.tick(source)
        except StopScript:
            stopped = True
            break
    names = [e[0] for e in rec.events]
    # a window goes idle -> open -> (closed) -> idle; steps are recorded only while open
    state = "idle"
    moves = {
        ("idle", "start"): "open",
        ("open", "end"): "closed",
        ("open", "abort"): "idle",
        ("closed", "abort"): "idle",
        ("open", "step"): "open",
    }
    for name in names:
        if name != "measuring":
            state = moves[(state, name)]  # KeyError: an illegal transition
    assert names.count("end") <= 1 + names.count("abort")
    after = sched.after[1] - sched.after[0] + 1 if sched.after else 0
    if stopped:  # stopped after the profiled steps and the clean ones after them
        assert not full and clock.steps == sched.last_profiled + after and names[-1] == "end"
    last = names[len(names) - 1 - names[::-1].index("start") :] if "start" in names else []
    if "end" in last:  # a finished window saw its warm-up step (if any) and every profiled one
        assert last.count("step") == profile + sched.profiler_warmup


@pytest.mark.slow
def test_reopened_window_never_crashes_the_profiler(tmp_path: Path) -> None:
    """Before, 2 runs in 6 of this script ended in a segfault (status 139) inside torch."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.capture.check_helpers import EXAMPLES, check_subprocess

    def run(i: int) -> Any:
        opts = ["--warmup", "1", "--steps", "4"]
        return check_subprocess(tmp_path / str(i), EXAMPLES / "batches_then_steps.py", opts=opts)

    # three independent processes at once: the second core works while one waits (its
    # imports, its exit); each still opens, closes and reopens its own profiler window
    with ThreadPoolExecutor(3) as pool:
        runs = list(pool.map(run, range(3)))
    for r in runs:
        assert r.code == 0, r.stderr[-2000:]
        assert r.run["steps"]["profiled_steps"] == 4


def test_every_call_the_clock_makes_is_listed_and_the_session_answers_it() -> None:
    """The clock calls its listener by name (a missing method is skipped), so a misspelt or
    unlisted name would silently do nothing: each name the clock uses is in LISTENER_CALLS, and
    check's session defines each listed call."""
    import inspect
    import re

    from torchdoctor.capture import clock as clock_module
    from torchdoctor.capture.clock import LISTENER_CALLS
    from torchdoctor.capture.session import Session

    used = set(re.findall(r'_(?:call|ask)\("(\w+)"', inspect.getsource(clock_module)))
    assert used == set(LISTENER_CALLS)
    assert [name for name in LISTENER_CALLS if not callable(getattr(Session, name, None))] == []
