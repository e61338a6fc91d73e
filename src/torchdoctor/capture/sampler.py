"""A sampling thread that records where the training thread is, every ``interval_s``, during the
measured steps: its Python stack (the user's frames), how much CPU it used since the previous
sample, whether it moved bytes through files, pipes or sockets, whether a garbage collection was
running, and which global modes were on.

Why a thread and not the profiler's ``with_stack``: the profiler records a stack for every
operator (overhead grows with the operator count and misses plain Python, sleeps and I/O
entirely), while a sample costs the same whatever runs, and a thread that mostly sleeps sees
time outside torch as well as inside it. ``benchmarks/bench_line_sampler.py`` measures both.

Each sample stands for the wall time since the previous one, so the samples add up to the
window exactly; ``capture/line_table.py`` turns them into the per-line table. Any error inside
the thread ends sampling with a note; the training thread never sees it.
"""

from __future__ import annotations

import gc
import os
import platform
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torchdoctor.capture import guest
from torchdoctor.capture.thread_stack import RawStack, raw_stack
from torchdoctor.code_paths import USER, CodePaths, code_paths

DEFAULT_INTERVAL_S = 0.001
"""One sample per millisecond asked."""
MAX_COST_SHARE = 0.02
"""The sampler's own CPU time, as a share of the wall time it samples, above which it halves
its rate (up to ``MAX_INTERVAL_S``): its cost is measured as it runs, never assumed. It never
changes the interpreter's switch interval: a lower one makes every thread of the process hand
the GIL over more often (a 1 ms sampler with a 0.2 ms switch interval added 45% to a GPU-bound
step on an H200). Each sample stands for the time since the previous one, so a Python stretch
sampled late is still counted whole."""
MAX_INTERVAL_S = 0.008
""" The slowest rate the sampler backs off to."""
_COST_CHECK_EVERY = 64
"""Samples between two looks at the sampler's own cost."""
MAX_SAMPLES = 200_000
"""A bound on memory for very long windows (200 s at the default rate)."""
MAX_USER_FRAMES = 48
"""User frames kept per sample: the innermost 32 and the outermost 16 of a deeper stack."""

Frame = tuple[str, int, str]
"""(file, line, function) of one user frame."""

STATE_UNKNOWN, STATE_RUNNING, STATE_IO, STATE_SLEEP, STATE_WAIT = 0, 1, 2, 3, 4
OURS_FLAG = 1 << 6
"""``flags`` bit of a sample taken inside our own bookkeeping (the step clock's tick: the
profiler's step, the window's start and end): the step clock leaves that time out of the step,
and so does the line table."""
# System call numbers by machine: file and socket transfers, sleeps, waits (locks, poll).
_SYSCALLS: dict[str, dict[int, int]] = {
    "x86_64": {
        **dict.fromkeys((0, 1, 3, 8, 17, 18, 19, 20, 40, 44, 45, 46, 47, 74, 75, 257, 277), 2),
        **dict.fromkeys((35, 230), 3),
        **dict.fromkeys((7, 23, 202, 232, 270, 271, 281, 61, 247), 4),
    },
    "aarch64": {
        **dict.fromkeys((63, 64, 57, 62, 67, 68, 65, 66, 71, 206, 207, 211, 212, 82, 83, 56), 2),
        **dict.fromkeys((101, 115), 3),
        **dict.fromkeys((73, 72, 98, 22, 260, 95), 4),
    },
}


@dataclass
class Samples:
    """What the sampler recorded, as columns (one entry per sample)."""

    t_ns: array[int] = field(default_factory=lambda: array("q"))
    """``time.perf_counter_ns()`` of each sample."""
    cpu_ns: array[int] = field(default_factory=lambda: array("q"))
    """The training thread's CPU time at each sample (-1 when unreadable)."""
    runq_ns: array[int] = field(default_factory=lambda: array("q"))
    """Time the training thread had spent runnable but waiting for a CPU (the scheduler's
    run-queue wait, ``/proc/.../schedstat``) at each sample (-1 when unreadable): other
    processes (or our own threads) holding the cores."""
    io_bytes: array[int] = field(default_factory=lambda: array("q"))
    """Bytes the training thread had read and written through system calls (-1: unreadable)."""
    state: array[int] = field(default_factory=lambda: array("b"))
    """What the thread's kernel side did at the sample (``STATE_*``), from its current system
    call: ``STATE_UNKNOWN`` where ``/proc`` cannot tell."""
    flags: array[int] = field(default_factory=lambda: array("b"))
    """Bit 0: a garbage collection was running; bits 1..: the ``modes`` probes, in order."""
    stack: array[int] = field(default_factory=lambda: array("i"))
    """Index into ``stacks``."""
    leaf: array[int] = field(default_factory=lambda: array("i"))
    """Index into ``leaves``: who owns the innermost frame (``user``, ``torch:nn``, ``stdlib:json``)."""
    stacks: list[tuple[Frame, ...]] = field(default_factory=list)
    """Distinct user stacks, innermost frame first (empty tuple: no user frame)."""
    leaves: list[str] = field(default_factory=list)
    entry: array[int] = field(default_factory=lambda: array("i"))
    """Index into ``entries``: the library call the innermost user frame was in (may be
    shorter than the other columns in hand-built samples: then unknown)."""
    entries: list[str] = field(default_factory=list)
    """``owner|qualname`` of the outermost library frame under the innermost user frame
    (``torch:nn|Module._wrapped_call_impl``, ``stdlib:copy|deepcopy``); ``""``: the user's own
    line was running (its Python, or tensor operators called from it directly)."""
    modes: tuple[str, ...] = ()
    """Names of the mode probes behind ``flags`` bits 1.."""
    start_ns: int = 0
    end_ns: int = 0
    interval_s: float = DEFAULT_INTERVAL_S
    gc_ns: int = 0
    """Time inside garbage collections of the training thread while sampling (exact)."""
    gc_collections: dict[int, int] = field(default_factory=dict)
    """Collections per generation while sampling."""
    errors: list[str] = field(default_factory=list)
    own_cpu_ns: int = 0
    """CPU time the sampling thread itself used (its measured cost)."""

    def __len__(self) -> int:
        return len(self.t_ns)


class _GcTimer:
    """``gc.callbacks`` entry: exact time in collections started by the training thread."""

    def __init__(self, thread_id: int) -> None:
        self.thread_id = thread_id
        self.active = False
        self.total_ns = 0
        self.collections: dict[int, int] = {}
        self._t0 = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        try:
            if threading.get_ident() != self.thread_id:
                return
            if phase == "start":
                self.active, self._t0 = True, time.perf_counter_ns()
            elif self.active:
                self.active = False
                self.total_ns += time.perf_counter_ns() - self._t0
                gen = int(info.get("generation", -1))
                self.collections[gen] = self.collections.get(gen, 0) + 1
        except Exception:  # never raise inside a garbage collection
            self.active = False


class StackSampler:
    """Samples one thread's Python stack from a daemon thread (see the module docstring)."""

    def __init__(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        modes: dict[str, Callable[[], bool]] | None = None,
        paths: CodePaths | None = None,
        ours: frozenset[Any] = frozenset(),
    ) -> None:
        self.interval_s = interval_s
        self.ours = ours
        """Code objects of our bookkeeping: a sample with one on its stack is ``OURS_FLAG``."""
        self.modes = dict(modes or {})
        self.paths = paths or code_paths()
        self.samples = Samples(interval_s=interval_s, modes=tuple(self.modes))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gc: _GcTimer | None = None
        self._target = 0
        self._stack_ids: dict[tuple[Frame, ...], int] = {}
        self._leaf_ids: dict[str, int] = {}
        self._entry_ids: dict[str, int] = {}
        self._cpu_clock: int | None = None
        self._io_fd: int | None = None
        self._sys_fd: int | None = None
        self._sched_fd: int | None = None
        self._syscalls = _SYSCALLS.get(platform.machine(), {})
        self._proc = _ProcReader()

    @property
    def running(self) -> bool:
        """Between ``start`` and ``stop``."""
        return self._thread is not None

    def start(self) -> None:
        """Sample the calling thread from now on."""
        if self._thread is not None:
            return
        self._target = threading.get_ident()
        try:
            self._cpu_clock = time.pthread_getcpuclockid(self._target)
        except (AttributeError, OSError):  # not on this platform
            self._cpu_clock = None
        self._io_fd = _open_proc(threading.get_native_id(), "io")
        self._sys_fd = _open_proc(threading.get_native_id(), "syscall") if self._syscalls else None
        self._sched_fd = _open_proc(threading.get_native_id(), "schedstat")
        self._gc = _GcTimer(self._target)
        gc.callbacks.append(self._gc)
        self.samples.start_ns = time.perf_counter_ns()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="torchdoctor-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> Samples:
        """Stop sampling (idempotent); returns what was recorded."""
        thread, self._thread = self._thread, None
        if thread is None:
            return self.samples
        self._stop.set()
        self.samples.end_ns = time.perf_counter_ns()
        thread.join(timeout=2.0)
        n = len(self.samples)
        if n:  # what a sample stood for on average (fewer than asked when the GIL was busy)
            span_s = (self.samples.end_ns - self.samples.start_ns) / 1e9
            self.samples.interval_s = max(self.interval_s, span_s / n)
        if self._gc is not None:
            # gc.callbacks is iterated by the collector, never by us from inside a callback.
            if self._gc in gc.callbacks:
                gc.callbacks.remove(self._gc)
            self.samples.gc_ns = self._gc.total_ns
            self.samples.gc_collections = dict(self._gc.collections)
        for fd in (self._io_fd, self._sys_fd, self._sched_fd):
            if fd is not None:
                os.close(fd)
        self._io_fd = self._sys_fd = self._sched_fd = None
        return self.samples

    # -- the sampling thread -------------------------------------------------------------------
    def _run(self) -> None:
        cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
        try:
            while not self._stop.wait(self.interval_s):
                if len(self.samples) >= MAX_SAMPLES or not self._sample():
                    break
                if len(self.samples) % _COST_CHECK_EVERY == 0:
                    self._back_off(time.thread_time_ns() - cpu0, time.perf_counter_ns() - wall0)
        except Exception as exc:  # a sampler bug ends sampling, never the training
            self.samples.errors.append(f"{type(exc).__name__}: {exc}")
            guest.note("stack sampler", exc)
        finally:
            self.samples.own_cpu_ns = time.thread_time_ns() - cpu0

    def _back_off(self, cpu_ns: int, wall_ns: int) -> None:
        """Halve the rate while the sampler's own CPU time is above ``MAX_COST_SHARE``."""
        if wall_ns > 0 and cpu_ns / wall_ns > MAX_COST_SHARE:
            self.interval_s = min(MAX_INTERVAL_S, self.interval_s * 2)

    def _sample(self) -> bool:
        raw = raw_stack(self._target)  # one tight walk; no frame is held past it
        t = time.perf_counter_ns()
        if raw is None:  # the training thread ended
            return False
        stack, leaf, entry, ours = self._walk(raw)  # first: an error leaves the columns aligned
        s = self.samples
        flags = 1 if (self._gc is not None and self._gc.active) else 0
        if ours:
            flags |= OURS_FLAG
        for bit, probe in enumerate(self.modes.values(), 1):
            try:
                if probe():
                    flags |= 1 << bit
            except Exception:
                pass
        sid = self._stack_ids.get(stack)
        if sid is None:
            sid = self._stack_ids[stack] = len(s.stacks)
            s.stacks.append(stack)
        lid = self._leaf_ids.get(leaf)
        if lid is None:
            lid = self._leaf_ids[leaf] = len(s.leaves)
            s.leaves.append(leaf)
        eid = self._entry_ids.get(entry)
        if eid is None:
            eid = self._entry_ids[entry] = len(s.entries)
            s.entries.append(entry)
        s.t_ns.append(t)
        s.cpu_ns.append(self._cpu_now())
        s.runq_ns.append(self._runq_now())
        s.io_bytes.append(self._io_now())
        s.state.append(self._state_now())
        s.flags.append(flags)
        s.stack.append(sid)
        s.leaf.append(lid)
        s.entry.append(eid)
        return True

    def _walk(self, raw: RawStack) -> tuple[tuple[Frame, ...], str, str, bool]:
        label = self.paths.label
        user: list[Frame] = []
        leaf = ""
        ours = False
        below: Any = None  # the outermost library frame seen before the first user frame
        for code, line in raw:
            if code in self.ours:
                ours = True
            owner = label(code.co_filename)
            if not leaf:
                leaf = self.paths.detail(code.co_filename)
            if owner == USER:
                user.append((code.co_filename, line, _qualname(code)))
            elif not user and owner != "torchdoctor":  # our wrappers: the call they wrap
                below = code
        if len(user) > MAX_USER_FRAMES:  # deep recursion: keep both ends of the stack
            user = user[: MAX_USER_FRAMES - 16] + user[-16:]
        entry = ""
        if below is not None and user:
            entry = f"{self.paths.detail(below.co_filename)}|{_qualname(below)}"
        return tuple(user), leaf, entry, ours

    def _cpu_now(self) -> int:
        if self._cpu_clock is None:
            return -1
        try:
            return time.clock_gettime_ns(self._cpu_clock)
        except OSError:
            self._cpu_clock = None
            return -1

    def _runq_now(self) -> int:
        if self._sched_fd is None:
            return -1
        try:
            return int(self._proc.read(self._sched_fd, 64).split()[1])
        except (OSError, ValueError, IndexError):
            self._sched_fd = None
            return -1

    def _io_now(self) -> int:
        if self._io_fd is None:
            return -1
        try:
            text = self._proc.read(self._io_fd, 512)
            # "rchar: N\nwchar: N\n...": bytes through read/write system calls of any kind.
            lines = text.split(b"\n", 2)
            return int(lines[0].split()[1]) + int(lines[1].split()[1])
        except (OSError, ValueError, IndexError):
            self._io_fd = None
            return -1

    def _state_now(self) -> int:
        if self._sys_fd is None:
            return STATE_UNKNOWN
        try:
            head = self._proc.read(self._sys_fd, 24).split(b" ", 1)[0]
        except OSError:
            self._sys_fd = None
            return STATE_UNKNOWN
        if head.startswith(b"running"):
            return STATE_RUNNING
        try:
            nr = int(head)
        except ValueError:
            return STATE_UNKNOWN
        return self._syscalls.get(nr, STATE_WAIT if nr >= 0 else STATE_UNKNOWN)


class _ProcReader:
    """Reads small ``/proc`` files without releasing the GIL: ``os.pread`` releases it for every
    call, and each time the training thread (running Python) takes it, the sampler waits for a
    forced switch to get it back; four reads per sample were four interruptions. libc's
    ``pread`` through ``ctypes.PyDLL`` (which keeps the GIL) costs a few microseconds instead.
    Falls back to ``os.pread`` where libc cannot be loaded."""

    def __init__(self) -> None:
        self._buf: Any = None
        self._pread: Any = None
        try:
            import ctypes

            libc = ctypes.PyDLL(None)
            fn = libc.pread
            fn.restype = ctypes.c_ssize_t
            fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
            self._buf = ctypes.create_string_buffer(512)
            self._pread = fn
        except Exception:  # no libc to load (or no ctypes): the plain read
            self._pread = None

    def read(self, fd: int, size: int) -> bytes:
        if self._pread is None:
            return os.pread(fd, size, 0)
        n = self._pread(fd, self._buf, min(size, 512), 0)
        if n < 0:
            raise OSError("pread failed")
        return bytes(self._buf.raw[:n])


def _qualname(code: Any) -> str:
    return str(getattr(code, "co_qualname", None) or code.co_name)


def _open_proc(native_id: int, name: str) -> int | None:
    """A descriptor on one of the thread's ``/proc`` files (Linux: ``io``, its I/O counters;
    ``syscall``, the system call it is in), re-read with ``pread``; None elsewhere."""
    try:
        fd = os.open(f"/proc/self/task/{native_id}/{name}", os.O_RDONLY)
    except OSError:
        return None
    try:
        os.pread(fd, 24, 0)  # some kernels refuse the read, not the open
        return fd
    except OSError:
        os.close(fd)
        return None
