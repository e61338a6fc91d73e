"""The watcher's core-wait reading (``capture/monitor.py``): how long the main thread waited
for a CPU core during a step it sampled long, read from the thread's schedstat at the step's
first tick and at each long-step tick. A fake clock and a fake schedstat."""

from __future__ import annotations

from array import array
from time import perf_counter
from types import SimpleNamespace

import pytest

from torchdoctor.capture import monitor as mon_mod
from torchdoctor.capture.monitor import Monitor


def _monitor() -> tuple[Monitor, SimpleNamespace]:
    clock = SimpleNamespace(
        steps=5,
        source="optimizer",
        step_s=array("d", [0.010] * 5),
        data_wait_s=array("d", [0.0] * 5),
        _pending_wait=0.0,
        _step_start=perf_counter(),  # the sixth step has just started: not long yet
    )
    profiler = SimpleNamespace(rss_at_start=None, recording=False)
    return Monitor(SimpleNamespace(clock=clock, profiler=profiler)), clock


def test_a_long_step_records_the_main_threads_wait_since_its_first_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (ns running, ns waiting) as the kernel counts them: 5 ms waited before the step, 70 ms
    # more by the long-step tick
    reads = iter([(1_000_000, 5_000_000), (9_000_000, 75_000_000)])
    monkeypatch.setattr(mon_mod, "_read_schedstat", lambda path: next(reads))
    mon, clock = _monitor()
    mon._tick()  # the step's first tick: not long, nothing sampled, its wait noted
    assert mon.samples == {} and mon.core_wait == {}
    clock._step_start = perf_counter() - 0.080  # now 80 ms into a 10 ms-median loop
    mon._tick()
    watched, waited = mon.core_wait[6]
    assert waited == pytest.approx(70.0) and watched > 0
    row = mon.record()["long_step_core_wait"]["6"]
    assert row["core_wait_ms"] == pytest.approx(70.0)


def test_no_schedstat_no_core_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off Linux (no /proc) the long step is still sampled; its wait is unknown, not zero."""
    monkeypatch.setattr(mon_mod, "_read_schedstat", lambda path: None)
    mon, clock = _monitor()
    mon._tick()
    clock._step_start = perf_counter() - 0.080
    mon._tick()
    assert 6 in mon.samples and mon.core_wait == {}
    assert mon.record()["long_step_core_wait"] == {}


def test_the_thread_id_is_read_when_watching_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """check builds the session, then the process that runs the script may be a fork, where
    threading still holds the parent's id for the main thread: the id is the one the main
    thread reads itself when the watcher starts (a stale one read nothing: no core wait)."""
    mon, _ = _monitor()
    paths: list[str] = []
    monkeypatch.setattr(mon_mod.threading, "get_native_id", lambda: 4242)
    monkeypatch.setattr(mon_mod, "_read_schedstat", lambda path: paths.append(path))
    mon._stop.set()  # the thread exits at once: only start's own reading is under test
    mon.start()
    mon.stop()
    mon._waited()
    assert paths == ["/proc/self/task/4242/schedstat"]
