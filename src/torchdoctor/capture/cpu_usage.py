"""Who had the CPU during the profiled window: this process's threads (time running and time
waiting for a core, from the scheduler's own counters), the DataLoader workers, and the rest
of the machine.

A step can be slow because its threads wait for a core: intra-op threads times processes beyond
the cores, or other jobs on a shared machine. The kernel counts, per thread, the nanoseconds it
ran and the nanoseconds it was runnable but waited on a run queue (``/proc/<pid>/task/<tid>/
schedstat``); ``/proc/stat`` says how busy every core was. Two samples, one at each end of the
window, give the window's figures. Linux only; elsewhere only process CPU time is recorded.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import threading
import time
from dataclasses import dataclass, field
from statistics import median
from typing import Any

_PROC = "/proc"

Reading = tuple[int, ...]
"""A ``StepWait.read``: the counting thread's ns running and waiting, its helpers' ns waiting
and ns running."""


class StepWait:
    """Run-queue wait of the thread that built it and of the process's other threads (torch's
    intra-op pool) but torchdoctor's own, read as often as a step ends.

    An operator split over intra-op threads ends when the last of them does: a helper waiting
    for a core holds up the counting thread, which sleeps meanwhile (not waiting, by its own
    counter). Each thread's schedstat stays open and a reading is one ``pread`` per thread
    (about 1 us each, against 70 us to open the file again); ``refresh`` picks up threads
    started since. Built in the thread it counts. Off Linux, or once the counting thread's
    reading fails (the script closed our descriptor), every reading is None: unknown, never
    zero. A helper that ended keeps its last reading."""

    def __init__(self) -> None:
        self._files: dict[int, tuple[int, int]] = {}
        """fd -> (device, inode) of each schedstat opened, to close only our own."""
        self._main = self._open(_native_id())
        self._helpers: dict[int, int] = {}
        self._last: dict[int, tuple[int, int]] = {}
        """tid -> (ns waiting, ns running) of each helper at its last reading."""
        self._gone_ns = (0, 0)
        """(ns waiting, ns running) of the helpers that ended."""
        self.refresh()

    def refresh(self) -> None:
        """Open the schedstat of threads started since (cheap: one directory listing)."""
        if self._main < 0:
            return
        ours = {t.native_id for t in threading.enumerate() if t.name.startswith("torchdoctor")}
        try:
            tids = {int(t) for t in os.listdir(f"{_PROC}/self/task")}
        except (OSError, ValueError):
            return
        for tid in tids - ours - {_native_id()} - set(self._helpers):
            fd = self._open(tid)
            if fd >= 0:
                self._helpers[tid] = fd

    def _open(self, tid: int) -> int:
        fd = _open_schedstat(tid)
        with contextlib.suppress(OSError):
            if fd >= 0:
                st = os.fstat(fd)
                self._files[fd] = (st.st_dev, st.st_ino)
        return fd

    def _release(self, fd: int) -> None:
        """Close ``fd`` if it still is the schedstat we opened: a script that closed every
        descriptor may hold a file of its own under the same number now."""
        opened = self._files.pop(fd, None)
        with contextlib.suppress(OSError):
            st = os.fstat(fd)
            if opened == (st.st_dev, st.st_ino):
                os.close(fd)

    def main(self) -> tuple[int, int] | None:
        """(ns running, ns waiting for a core) of the counting thread since it started."""
        return _read_fd(self._main)

    def read(self) -> tuple[int, int, int, int] | None:
        """The counting thread's ns running and waiting, and its helpers' ns waiting and ns
        running (a helper spinning for work waits too: ``step_lost_s`` bounds what they cost a
        step; it runs too: ``step_run_s``)."""
        main = _read_fd(self._main)
        if main is None:
            self.close()
            return None
        wait, run = self._gone_ns
        for tid, fd in list(self._helpers.items()):
            stat = _read_fd(fd)
            if stat is None:  # the thread ended: what it waited and ran so far stays counted
                del self._helpers[tid]
                gone = self._last.pop(tid, (0, 0))
                self._gone_ns = (self._gone_ns[0] + gone[0], self._gone_ns[1] + gone[1])
                wait, run = wait + gone[0], run + gone[1]
                self._release(fd)
                continue
            self._last[tid] = (stat[1], stat[0])
            wait, run = wait + stat[1], run + stat[0]
        return main[0], main[1], wait, run

    def close(self) -> None:
        """Stop reading (idempotent); later readings are None."""
        fds = [self._main, *self._helpers.values()]
        self._main, self._helpers = -1, {}
        for fd in fds:
            self._release(fd)


def step_lost_s(wall_s: float, start: Reading | None, end: Reading | None) -> float:
    """Seconds of a step (``wall_s`` long, between two ``StepWait.read``s) lost to waiting for
    a core: its thread's own wait, and its helpers' wait up to the time the thread was neither
    running nor waiting (blocked, as on a helper that had no core; idle helpers that spin
    wait too, and never cost a thread that runs); NaN when unknown."""
    if start is None or end is None:
        return math.nan
    _, wait, helpers, blocked = _step_waits(wall_s, start, end)
    return wait + min(helpers, blocked)


def step_threads_wait_s(wall_s: float, start: Reading | None, end: Reading | None) -> float:
    """Seconds of a step (as ``step_lost_s``) its helpers waited for a core beyond what
    ``step_lost_s`` counts, up to the time the counting thread ran: a thread that spins at a
    parallel region's barrier for a helper without a core runs meanwhile. At most what intra-op
    threads waiting for one another cost the step (a helper preempted while it spins idle
    between regions counts too, and costs nothing; of several helpers waiting at once only the
    last holds a region up; a helper that waited while the thread waited too cost the step
    nothing more, and on a busy machine that is most of it); NaN when unknown."""
    if start is None or end is None:
        return math.nan
    run, _, helpers, blocked = _step_waits(wall_s, start, end)
    return min(run, helpers - min(helpers, blocked))


def step_run_s(start: Reading | None, end: Reading | None) -> float:
    """CPU seconds a step (between two ``StepWait.read``s) ran: its thread's and its helpers'
    time on a core; NaN when unknown. Unlike the helpers' wait it is not capped by the step's
    own running time, so a step that did more work (an evaluation) reads more; but spinning is
    running too: the thread spins at a parallel region's barrier while a helper has no core,
    idle helpers spin between regions (libgomp spins before it sleeps), so under load every
    step reads more (control_batched_scoring.py at load 13-20: 0-310 ms for the same work).
    ``rules/families/long_steps`` takes the thread's spin off (``step_threads_wait_s``)."""
    if start is None or end is None or len(start) < 4 or len(end) < 4:
        return math.nan
    return max(0, end[0] - start[0] + end[3] - start[3]) / 1e9


def _step_waits(wall_s: float, start: Reading, end: Reading) -> tuple[float, float, float, float]:
    """(the counting thread's time running, its wait, its helpers' wait, the time it was
    neither running nor waiting) over a step, in seconds."""
    run, wait = (end[0] - start[0]) / 1e9, (end[1] - start[1]) / 1e9
    return run, wait, max(0.0, (end[2] - start[2]) / 1e9), max(0.0, wall_s - run - wait)


def _native_id() -> int:
    return threading.get_native_id()


def _open_schedstat(tid: int, pid: str = "self") -> int:
    try:
        return os.open(f"{_PROC}/{pid}/task/{tid}/schedstat", os.O_RDONLY)
    except (AttributeError, OSError):
        return -1


def _read_fd(fd: int) -> tuple[int, int] | None:
    if fd < 0:
        return None
    try:
        run_ns, wait_ns = os.pread(fd, 96, 0).split()[:2]
        return int(run_ns), int(wait_ns)
    except (AttributeError, OSError, ValueError):
        return None


def _close(fd: int) -> None:
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


def _machine_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks since boot, summed over the cores this process may run on
    (the ``cpuN`` lines of /proc/stat): other jobs on cores we cannot use do not count."""
    try:
        allowed = {f"cpu{n}" for n in os.sched_getaffinity(0)}
        with open(f"{_PROC}/stat", encoding="ascii") as f:
            lines = [ln.split() for ln in f if ln.startswith("cpu") and not ln.startswith("cpu ")]
    except (AttributeError, OSError):
        return None
    busy = total = 0
    for parts in lines:
        if parts[0] not in allowed:
            continue
        fields = [int(x) for x in parts[1:9]]
        idle = fields[3] + fields[4]  # idle + iowait
        busy, total = busy + sum(fields) - idle, total + sum(fields)
    return (busy, total) if total else None


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask: taskset, cgroups cpusets)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass
class CpuSample:
    """One reading of the counters."""

    wall_s: float
    process_cpu_s: float
    threads: dict[int, tuple[int, int]] = field(default_factory=dict)
    """tid -> (ns running, ns waiting for a core), since each thread started."""
    machine: tuple[int, int] | None = None
    workers: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Worker pid -> (ns running, ns waiting), summed over its threads."""


def _process_threads(pid: str = "self") -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    try:
        tids = os.listdir(f"{_PROC}/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        fd = _open_schedstat(int(tid), pid)
        stat = _read_fd(fd)
        _close(fd)
        if stat is not None:
            out[int(tid)] = stat
    return out


def sample(worker_pids: list[int] = ()) -> CpuSample:  # type: ignore[assignment]
    """Read the counters now (cheap: a few small /proc reads per thread)."""
    workers = {}
    for pid in worker_pids:
        threads = _process_threads(str(pid))
        if threads:
            workers[pid] = (
                sum(r for r, _ in threads.values()),
                sum(w for _, w in threads.values()),
            )
    return CpuSample(
        wall_s=time.perf_counter(),
        process_cpu_s=time.process_time(),
        threads=_process_threads(),
        machine=_machine_ticks(),
        workers=workers,
    )


def window_record(
    a: CpuSample, b: CpuSample, main_tid: int, intra_op_threads: int, interop_threads: int
) -> dict[str, Any]:
    """The window between two samples as plain data for ``run.json`` (seconds and cores)."""
    wall = max(b.wall_s - a.wall_s, 1e-9)
    run = wait = 0.0
    busy_threads = 0
    main_run = main_wait = None
    for tid, (r1, w1) in b.threads.items():
        r0, w0 = a.threads.get(tid, (0, 0))  # a thread started in the window: all of it
        dr, dw = (r1 - r0) / 1e9, (w1 - w0) / 1e9
        run, wait = run + dr, wait + dw
        busy_threads += dr >= 0.1 * wall
        if tid == main_tid:
            main_run, main_wait = dr, dw
    wr = ww = 0.0
    for pid, (r1, w1) in b.workers.items():
        r0, w0 = a.workers.get(pid, (0, 0))
        wr, ww = wr + (r1 - r0) / 1e9, ww + (w1 - w0) / 1e9
    cores = usable_cores()
    out: dict[str, Any] = {
        "wall_s": wall,
        "process_cpu_s": b.process_cpu_s - a.process_cpu_s,
        "cores": cores,
        "cpu_count": os.cpu_count(),
        "intra_op_threads": intra_op_threads,
        "interop_threads": interop_threads,
        "threads_running": busy_threads,
        "threads_run_s": run if b.threads else None,
        "threads_runqueue_wait_s": wait if b.threads else None,
        "main_thread_run_s": main_run,
        "main_thread_runqueue_wait_s": main_wait,
        "workers": len(b.workers),
        "workers_cpu_s": wr if b.workers else None,
        "workers_runqueue_wait_s": ww if b.workers else None,
        "machine_busy_cores": None,
        "other_busy_cores": None,
    }
    if a.machine and b.machine and b.machine[1] > a.machine[1]:
        share = (b.machine[0] - a.machine[0]) / (b.machine[1] - a.machine[1])
        busy = share * cores
        ours = (run if b.threads else out["process_cpu_s"]) / wall + wr / wall
        out["machine_busy_cores"] = busy
        out["other_busy_cores"] = max(0.0, busy - ours)
    return out


def thread_probe(
    threads_a: int,
    threads_b: int,
    rounds: int = 9,
    budget_s: float = 1.5,
    set_threads: Any = None,
) -> dict[str, Any] | None:
    """Time the same small matmul and elementwise work with ``threads_a`` and ``threads_b``
    intra-op threads, interleaved (A B or B A, shuffled per round), and return the per-round
    ratios (A / B). The thread count is restored; None when torch is not importable.
    ``set_threads``: torch's own ``set_num_threads`` where a wrapper that records the script's
    calls is installed (the probe's calls are not the script's).

    Run only after the script's steps, when the window suggested oversubscription: it measures
    what the current thread count costs on this machine now, against fewer threads."""
    try:
        import torch
    except ImportError:
        return None
    before = torch.get_num_threads()
    set_num_threads = set_threads or torch.set_num_threads
    x, y = torch.randn(192, 192), torch.randn(1 << 16)

    def work() -> float:
        t0 = time.perf_counter()
        for _ in range(4):
            torch.mm(x, x)
            torch.add(y, 1.0)
        return time.perf_counter() - t0

    ratios: list[float] = []
    deadline = time.perf_counter() + budget_s
    try:
        for _ in range(rounds):
            times = {}
            for n in random.sample([threads_a, threads_b], 2):
                set_num_threads(n)
                work()  # let the thread pool settle on the new size
                times[n] = work()
            ratios.append(times[threads_a] / max(times[threads_b], 1e-9))
            if time.perf_counter() > deadline and len(ratios) >= 3:
                break
    finally:
        set_num_threads(before)
    ratios.sort()
    out: dict[str, Any] = {
        "threads_a": threads_a,
        "threads_b": threads_b,
        "rounds": len(ratios),
        "ratio_median": median(ratios),
        "ratio_low": ratios[0],
        "ratio_high": ratios[-1],
    }
    from torchdoctor.rules.cpu_rules import implausible_probe

    out["failed"] = implausible_probe(out)  # a ratio no thread count makes: not a measurement
    return out


def main_thread_id() -> int:
    """The kernel's id of the calling thread (the script's main thread when called at install)."""
    return threading.get_native_id()
