"""Each step's wait for a core: the step clock reads its thread's run-queue wait (schedstat) at
every step boundary (``clock.core_wait_s``), the watcher judges a running step less the wait so
far before it samples it, and ``run.json``'s ``monitor.step_core_wait_ms`` carries every step's.
Fake readings of the counter; one real one."""

from __future__ import annotations

import math
import os
import sys
import threading
from array import array
from time import perf_counter
from types import SimpleNamespace
from typing import Any

import pytest

from torchdoctor.capture import clock as clock_mod
from torchdoctor.capture.clock import StepClock
from torchdoctor.capture.cpu_usage import ThreadWait
from torchdoctor.capture.monitor import Monitor
from torchdoctor.capture.options import CheckOptions

MS = 1_000_000  # ns


class FakeWait:
    """A thread's run-queue wait counter that the test moves by hand (ns; -1: unknown)."""

    def __init__(self) -> None:
        self.waited_ns = 0

    def ns(self) -> int:
        return self.waited_ns

    def close(self) -> None:
        self.waited_ns = -1


class Listener:
    """Waits 50 ms for a core while the profiler starts (our bookkeeping, between steps)."""

    def __init__(self, wait: list[FakeWait]) -> None:
        self.wait = wait
        self.started_after = 0

    def window_start(self, warmup: int) -> None:
        self.wait[0].waited_ns += 50 * MS
        self.started_after = len(self.wait)


def _clock(monkeypatch: pytest.MonkeyPatch) -> tuple[StepClock, list[FakeWait]]:
    made: list[FakeWait] = []
    monkeypatch.setattr(clock_mod, "ThreadWait", lambda: made.append(FakeWait()) or made[-1])
    opts = CheckOptions(warmup_steps=3, profile_steps=2, clean_steps=0, full=True)
    clock = StepClock(opts, Listener(made))
    clock.begin()
    return clock, made


def test_each_step_gets_the_wait_between_its_own_boundaries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Steps waited 7, 0, 30 and 4 ms; the 50 ms waited while the profiler started (between two
    steps) belong to no step; the first step's start was never read: unknown."""
    clock, made = _clock(monkeypatch)
    clock.tick("optimizer")  # the thread is adopted here: its counter opens now
    (wait,) = made
    for ms in (7, 0, 30, 4):
        wait.waited_ns += ms * MS
        clock.tick("optimizer")
    got = [round(w * 1e3, 6) for w in clock.core_wait_s]
    assert math.isnan(got[0]) and got[1:] == [7.0, 0.0, 30.0, 4.0]
    assert len(clock.core_wait_s) == len(clock.step_s) == 5
    assert clock.listener.started_after == 1  # the profiler started within these steps


def test_a_forked_child_stops_reading_the_parents_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, made = _clock(monkeypatch)
    clock.tick("optimizer")
    clock.quiet()
    assert made[0].waited_ns == -1  # closed


def test_the_real_counter_reads_the_thread_that_opened_it() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("schedstat is Linux's")
    got: list[tuple[int, ThreadWait]] = []
    t = threading.Thread(target=lambda: got.append((threading.get_native_id(), ThreadWait())))
    t.start()
    t.join()
    ((tid, other),) = got
    assert os.readlink(f"/proc/self/fd/{other._fd}").endswith(f"/task/{tid}/schedstat")
    main = ThreadWait()
    a = main.ns()
    sum(range(200_000))
    assert 0 <= a <= main.ns()
    main.close()
    assert main.ns() == -1  # closed: unknown, never zero
    other.close()


def _monitor(step_ms: float, core_ms: float, so_far_ms: float = 0.0) -> tuple[Monitor, Any]:
    """Five steps of ``step_ms`` each, ``core_ms`` of it waiting for a core; the sixth has just
    started and waited ``so_far_ms`` so far."""
    clock = SimpleNamespace(
        steps=5,
        source="optimizer",
        step_s=array("d", [step_ms / 1e3] * 5),
        data_wait_s=array("d", [0.0] * 5),
        core_wait_s=array("d", [core_ms / 1e3] * 5),
        _pending_wait=0.0,
        _step_start=perf_counter(),
        core_wait_so_far_s=lambda: so_far_ms / 1e3,
    )
    profiler = SimpleNamespace(rss_at_start=None, recording=False)
    return Monitor(SimpleNamespace(clock=clock, profiler=profiler)), clock


def test_a_step_long_only_by_its_wait_so_far_is_not_sampled() -> None:
    """A 10 ms loop; the sixth step is 80 ms in, 75 ms of it waiting for a core: 5 ms of its
    own, not long. With 20 ms of waiting it has 60 ms of its own: sampled."""
    mon, clock = _monitor(10.0, 0.0, so_far_ms=75.0)
    clock._step_start = perf_counter() - 0.080
    mon._tick()
    assert mon.samples == {}
    clock.core_wait_so_far_s = lambda: 0.020
    mon._tick()
    assert list(mon.samples) == [6]


def test_the_typical_step_is_judged_less_its_wait() -> None:
    """Under load every step took 40 ms, 36 of them waiting: the loop's own step is 4 ms. A
    step 30 ms in with no wait is long against that (it would not be against 40 ms)."""
    mon, clock = _monitor(40.0, 36.0)
    clock._step_start = perf_counter() - 0.030
    mon._tick()
    assert list(mon.samples) == [6]
    mon, clock = _monitor(40.0, 0.0)
    clock._step_start = perf_counter() - 0.030
    mon._tick()
    assert mon.samples == {}


def test_the_record_has_every_steps_wait_unknown_as_none() -> None:
    mon, clock = _monitor(10.0, 2.5)
    clock.core_wait_s[0] = math.nan
    assert mon.record()["step_core_wait_ms"] == [None, 2.5, 2.5, 2.5, 2.5]
