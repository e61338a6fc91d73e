"""Each step's wait for a core: the step clock reads its thread's and its helpers' run-queue wait
(schedstat) at every step boundary (``clock.core_wait_s``), the watcher judges a running step less the wait so
far before it samples it, and ``run.json``'s ``monitor.step_core_wait_ms`` carries every step's.
Fake readings of the counter; one real one."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from array import array
from pathlib import Path
from time import perf_counter
from types import SimpleNamespace
from typing import Any

import pytest

from torchdoctor.capture import clock as clock_mod
from torchdoctor.capture import cpu_usage
from torchdoctor.capture.clock import StepClock
from torchdoctor.capture.cpu_usage import StepWait, step_lost_s, step_run_s, step_threads_wait_s
from torchdoctor.capture.monitor import Monitor
from torchdoctor.capture.options import CheckOptions
from torchdoctor.record.typed import recorded

MS = 1_000_000  # ns


class FakeWait:
    """A thread's run-queue wait counter that the test moves by hand (ns; -1: unknown)."""

    def __init__(self) -> None:
        self.waited_ns = 0
        self.ran_ns = self.helpers_ran_ns = 0
        self.refreshed = 0

    def read(self) -> tuple[int, int, int, int] | None:
        if self.waited_ns < 0:
            return None
        return (self.ran_ns, self.waited_ns, 0, self.helpers_ran_ns)

    def main(self) -> tuple[int, int] | None:
        return (0, self.waited_ns) if self.waited_ns >= 0 else None

    def refresh(self) -> None:
        self.refreshed += 1

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
    monkeypatch.setattr(clock_mod, "StepWait", lambda: made.append(FakeWait()) or made[-1])
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
    assert wait.refreshed == 1  # after the second step: the intra-op threads it started


def test_each_step_gets_the_cpu_its_thread_and_helpers_ran(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The thread ran 3, 12 and 1 ms, its helpers 5, 40 and 0: each step's CPU run is the sum
    (``monitor.step_run_ms``); a step whose end was never read is unknown."""
    clock, made = _clock(monkeypatch)
    clock.tick("optimizer")
    (wait,) = made
    for ran, helpers in ((3, 5), (12, 40), (1, 0)):
        wait.ran_ns += ran * MS
        wait.helpers_ran_ns += helpers * MS
        clock.tick("optimizer")
    wait.waited_ns = -1  # the reading failed
    clock.tick("optimizer")
    got = [round(r * 1e3, 6) for r in clock.run_s]
    assert math.isnan(got[0]) and got[1:4] == [8.0, 52.0, 1.0] and math.isnan(got[4])
    assert len(clock.run_s) == len(clock.step_s) == 5


@pytest.mark.parametrize(
    ("start", "end", "ms"),
    [
        ((10, 0, 0, 5), (30, 7, 9, 25), 40.0),  # 20 ms the thread, 20 its helpers: waits aside
        ((10, 0, 0), (30, 7, 9), math.nan),  # a reading without the helpers' run: unknown
        (None, (30, 7, 9, 25), math.nan),
    ],
)
def test_a_steps_cpu_run_is_its_threads_and_its_helpers(
    start: tuple[int, ...] | None, end: tuple[int, ...], ms: float
) -> None:
    got = step_run_s(
        None if start is None else tuple(x * MS for x in start), tuple(x * MS for x in end)
    )
    assert got * 1e3 == pytest.approx(ms, nan_ok=True)


def test_a_forked_child_stops_reading_the_parents_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, made = _clock(monkeypatch)
    clock.tick("optimizer")
    clock.quiet()
    assert made[0].waited_ns == -1  # closed


def test_the_real_counter_reads_the_helpers_but_not_torchdoctors_threads() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("schedstat is Linux's")
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, name="pool-1")
    ours = threading.Thread(target=stop.wait, name="torchdoctor-sampler")
    helper.start()
    ours.start()
    try:
        w = StepWait()
        assert helper.native_id in w._helpers and ours.native_id not in w._helpers
        path = os.readlink(f"/proc/self/fd/{w._main}")
        assert path.endswith(f"/task/{threading.get_native_id()}/schedstat")
        a = w.read()
        sum(range(500_000))
        time.sleep(0.002)  # the kernel adds to a thread's counters when it leaves the core
        b = w.read()
        assert a is not None and b is not None and a[0] < b[0]  # this thread ran meanwhile
        assert all(x <= y for x, y in zip(a, b, strict=True))
    finally:
        stop.set()
        helper.join()
        ours.join()
    c = w.read()
    assert c is not None and c[2] >= b[2]  # an ended helper's wait stays counted
    w.close()
    assert w.read() is None and w.main() is None  # closed: unknown, never zero


def test_an_ended_helper_keeps_its_wait_and_an_unreadable_thread_is_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readings = {3: (50, 10), 4: (1, 5)}  # fd -> (ns running, ns waiting)
    monkeypatch.setattr(cpu_usage, "_read_fd", lambda fd: readings.get(fd))
    w = StepWait.__new__(StepWait)
    w._main, w._helpers, w._last, w._gone_ns, w._files = 3, {77: 4}, {}, (0, 0), {}
    assert w.read() == (50, 10, 5, 1)  # the thread's run and wait, the helpers' wait and run
    del readings[4]  # the helper ended
    readings[3] = (60, 12)
    assert w.read() == (60, 12, 5, 1) and w._helpers == {}
    assert w.read() == (60, 12, 5, 1)
    del readings[3]  # the counting thread's own counter is gone: nothing is known
    assert w.read() is None and w._main == -1


def test_a_descriptor_the_script_reused_is_never_read_as_ours_nor_closed(tmp_path: Path) -> None:
    """A script closed every descriptor and opened a file of its own under our number."""
    if not sys.platform.startswith("linux"):
        pytest.skip("schedstat is Linux's")
    w = StepWait()
    fd = w._main
    mine = tmp_path / "log.txt"
    mine.write_text("step loss\n")
    opened = os.open(mine, os.O_RDONLY)
    reused = os.dup2(opened, fd)  # our number, now the script's file
    os.close(opened)
    try:
        assert w.read() is None and w.main() is None
        w.close()
        assert os.read(reused, 4) == b"step"  # still the script's, still open
    finally:
        os.close(reused)


@pytest.mark.parametrize(
    ("run_ms", "wait_ms", "helpers_ms", "lost_ms", "spun_ms"),
    [
        (90, 10, 80, 10, 80),  # the thread ran (a collection) while idle helpers spun: its own wait
        # blocked 70 ms on helpers that waited 120: 70 of it is theirs; of the other 50 only
        # the 20 ms the thread ran can have held it at a barrier
        (20, 10, 120, 80, 20),
        (20, 10, 30, 40, 0),  # blocked 70 ms, helpers waited 30: those 30
        (100, 0, 50, 0, 50),  # never blocked (spinning at the barrier): all 50 left to the threads
    ],
)
def test_a_step_loses_its_own_wait_and_its_helpers_up_to_its_blocked_time(
    run_ms: int, wait_ms: int, helpers_ms: int, lost_ms: int, spun_ms: int
) -> None:
    """``step_lost_s`` is the step's wait for other processes' cores; the helpers' wait it leaves
    out (``step_threads_wait_s``) is the most the threads' waiting for one another cost."""
    start = (1000 * MS, 500 * MS, 700 * MS)
    end = (start[0] + run_ms * MS, start[1] + wait_ms * MS, start[2] + helpers_ms * MS)
    assert step_lost_s(0.100, start, end) == pytest.approx(lost_ms / 1e3)
    assert step_threads_wait_s(0.100, start, end) == pytest.approx(spun_ms / 1e3)
    assert math.isnan(step_lost_s(0.100, None, end))
    assert math.isnan(step_threads_wait_s(0.100, start, None))


def _monitor(step_ms: float, core_ms: float, so_far_ms: float = 0.0) -> tuple[Monitor, Any]:
    """Five steps of ``step_ms`` each, ``core_ms`` of it waiting for a core; the sixth has just
    started and waited ``so_far_ms`` so far."""
    clock = SimpleNamespace(
        steps=5,
        source="optimizer",
        step_s=array("d", [step_ms / 1e3] * 5),
        data_wait_s=array("d", [0.0] * 5),
        core_wait_s=array("d", [core_ms / 1e3] * 5),
        run_s=array("d", [step_ms / 2e3] * 5),
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
    clock.run_s[1] = math.nan
    assert mon.record().step_core_wait_ms == [None, 2.5, 2.5, 2.5, 2.5]
    assert mon.record().step_run_ms == [5.0, None, 5.0, 5.0, 5.0]
    # run.json's monitor section: its keys in the order they have always been written
    assert list(recorded(mon.record())) == [
        "interval_s",
        "source",
        "long_step_samples",
        "step_core_wait_ms",
        "step_run_ms",
        "no_step_notice",
    ]
    del clock.run_s  # a clock without the reading: the key is left out, as in an older record
    assert mon.record().step_run_ms is None and "step_run_ms" not in recorded(mon.record())


def _schedstat_fds() -> set[str]:
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").endswith("/schedstat"):
                fds.add(fd)
        except OSError:
            continue
    return fds


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_a_check_in_this_process_leaves_no_schedstat_open(tmp_path: Path) -> None:
    """The step clock's wait reader keeps each thread's schedstat open while the script runs;
    the session closes them at its end. A guest run in the user's process (an integration, the
    suite's in-process checks) left them open: the suite reached 1024 descriptors and select()
    failed with 'filedescriptor out of range'."""
    from tests.capture.check_helpers import EXAMPLES, check_inprocess

    before = _schedstat_fds()
    r = check_inprocess(tmp_path, EXAMPLES / "item_per_step.py")
    assert r.code == 0, r.stderr
    assert r.folder is not None
    import json

    waits = json.loads((r.folder / "run.json").read_text())["monitor"]["step_core_wait_ms"]
    assert any(w is not None for w in waits)  # the reader did read
    assert _schedstat_fds() - before == set()


def test_an_older_record_without_the_cpu_run_reads_as_before() -> None:
    """``monitor.step_run_ms`` is absent from records written before it: None, and the section
    is written back without it; a record with it keeps it."""
    from torchdoctor.record.run import RunRecord

    old = {"monitor": {"interval_s": 0.01, "step_core_wait_ms": [None, 2.5]}}
    run = RunRecord.from_dict(old)
    assert run.monitor.step_run_ms is None
    assert "step_run_ms" not in run.to_dict()["monitor"]
    new = {"monitor": {**old["monitor"], "step_run_ms": [None, 7.25]}}
    run = RunRecord.from_dict(new)
    assert run.monitor.step_run_ms == [None, 7.25]
    assert run.to_dict()["monitor"]["step_run_ms"] == [None, 7.25]
