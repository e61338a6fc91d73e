"""A watcher thread beside the script: where the main thread is during a step that runs far
longer than the others, a word on standard error when no step has been seen for a minute, and
the profiler's memory during the window.

It wakes every ``interval_s`` and reads state (the clock's step times, the process's resident
memory); it never calls into torch and never blocks the script. Sampling the main thread is
``sys._current_frames()`` read in one tight walk (``thread_stack.py``): cheap (about 13 us for
a thread 30 user frames deep), done while a step is already long, and at most twice in each step
that is not (400 looks in all, none while the profiler records): the call chains the loop runs
every step, against which a long step's samples tell the loop's own work slowed down from other
work. A step is long by its
time less its data wait and its wait for a core (the step clock reads that wait at every step
boundary, ``clock.core_wait_s``; a running step's, its thread's alone): a step made long by
other processes holding the cores is the machine's, not the loop's.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from statistics import median
from time import perf_counter
from typing import Any

from torchdoctor.capture.thread_stack import RawStack, frame_stack, raw_stack
from torchdoctor.code_paths import code_paths
from torchdoctor.record.run import MonitorRecord
from torchdoctor.rules import thresholds as th

_MAX_LONG_STEPS = 32
_MAX_SAMPLES_PER_STEP = 40
_STACK_DEPTH = 3
_ORDINARY_PER_STEP = 2
"""Samples kept of a step that did not run long (the lines the loop runs every step)."""
_MAX_ORDINARY = 400
"""Samples of ordinary steps kept in all: enough to see each line that holds a tenth of a step."""
_ORDINARY_MAX_RATIO = 2.0
"""A step's samples count as ordinary only when it ended under this many times the median step
(less its waits): a step that ran long between two looks is never the baseline."""


def rss_bytes() -> int | None:
    """Resident memory of this process (Linux ``/proc/self/statm``), None elsewhere."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, None elsewhere."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


_RUNNER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner.py")


def user_stack(frame: Any, depth: int = _STACK_DEPTH) -> tuple[str, ...]:
    """Frames of user code (outside every library) as ``file:line in function``, innermost
    first: the innermost ``depth - 1`` and the outermost one (the script's own loop line)."""
    return _user_lines(frame_stack(frame), depth)


def thread_user_stack(ident: int | None, depth: int = _STACK_DEPTH) -> tuple[str, ...]:
    """:func:`user_stack` of another thread, read in one tight walk (``thread_stack.py``)."""
    raw = raw_stack(ident)
    return _user_lines(raw, depth) if raw else ()


def _thread_chain(ident: int | None) -> tuple[str, ...]:
    """Every user frame of another thread (up to 64), innermost first: the whole path by which
    the script reached its line (an evaluation's call of the model is told from the training
    step's by the frames between them, which :func:`user_stack` leaves out)."""
    raw = raw_stack(ident)
    return _user_lines(raw, 64) if raw else ()


def chain_key(chain: Sequence[str]) -> str:
    """A short stable name for a user call chain in ``run.json`` (12 hex digits)."""
    return hashlib.blake2b("\n".join(chain).encode(), digest_size=6).hexdigest()


def _user_lines(raw: RawStack, depth: int) -> tuple[str, ...]:
    is_user = code_paths().is_user
    out: list[str] = []
    for code, line in raw:
        if len(out) >= 64:
            break
        name = code.co_filename
        if code.co_name == "run_function" and os.path.abspath(name) == _RUNNER_FILE:
            break  # what called the script (pytest, an API caller) is not the script's loop
        if not name.startswith("<") and is_user(name):
            out.append(f"{name}:{line} in {code.co_name}")
    return _trim(out, depth)


def _trim(lines: Sequence[str], depth: int) -> tuple[str, ...]:
    """The innermost ``depth - 1`` lines and the outermost one."""
    if len(lines) <= depth:
        return tuple(lines)
    return (*lines[: depth - 1], lines[-1])


def _net(steps: Sequence[float], *waits: Sequence[float], last: int) -> list[float]:
    """The last ``last`` steps, each less its waits (a NaN wait, unknown, counts as none)."""
    n = min(len(steps), *(len(w) for w in waits))  # the script's thread may be appending
    return [
        steps[i] - sum(w[i] for w in waits if not math.isnan(w[i]))
        for i in range(max(0, n - last), n)
    ]


class Monitor:
    """The watcher thread (daemon: it never keeps the process alive)."""

    def __init__(self, session: Any, interval_s: float = 0.01) -> None:
        self.session = session
        self.interval_s = interval_s
        self.main_ident = threading.main_thread().ident
        self.samples: dict[int, Counter[tuple[tuple[str, ...], tuple[str, ...]]]] = {}
        """Step number (1-based, as the clock counts) -> (sampled user stack, its whole user
        chain) while it ran long."""
        self.ordinary: Counter[tuple[str, ...]] = Counter()
        """User chains sampled in steps that did not run long."""
        self.ordinary_steps = 0
        """Steps whose samples are in ``ordinary``."""
        self._pending: tuple[int, list[tuple[str, ...]]] = (0, [])
        """(step, its chains so far) of the step under way, kept if it ends ordinary."""
        self.sampled_source: str | None = None
        self.noticed = False
        self.peak_window_growth = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = perf_counter()

    def start(self) -> None:
        """Start watching (idempotent)."""
        if self._thread is None:
            self._started = perf_counter()
            self._thread = threading.Thread(
                target=self._run, name="torchdoctor-monitor", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
        self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._tick()
            except Exception:  # a watcher never breaks the script; it just stops looking
                return

    def _tick(self) -> None:
        clock = self.session.clock
        self._watch_memory()
        n = clock.steps
        if n == 0 and clock.source is None:
            self._notice_no_step()
            return
        if n < 3 or getattr(clock, "bookkeeping", False):
            return  # our own work between two steps is no step's
        if clock.source != self.sampled_source:  # counting restarted on a stronger signal
            self.samples.clear()
            self.ordinary.clear()
            self.ordinary_steps = 0
            self._pending = (0, [])
            self.sampled_source = clock.source
        # What the rule judges: each step less its wait for a batch (a data-bound loop's long
        # compute part would never reach 5x a step made mostly of waiting) and for a core.
        typical = median(_net(clock.step_s, clock.data_wait_s, clock.core_wait_s, last=50))
        long = max(th.RARE_LONG_RATIO * typical, th.RARE_LONG_MIN_MS / 1e3)
        step = n + 1
        self._settle(step, typical)
        elapsed = perf_counter() - clock._step_start - clock._pending_wait
        # the wait so far is read only for a step already long by its wall time
        if elapsed < long or elapsed - clock.core_wait_so_far_s() < long:
            # never beside the profiler and its line sampler: the window the findings come from
            # sees the watcher as it always did (a look only in a step already long)
            if not getattr(self.session.profiler, "recording", False):
                self._sample_ordinary(step)
            return
        if step not in self.samples and len(self.samples) >= _MAX_LONG_STEPS:
            return
        counts = self.samples.setdefault(step, Counter())
        if sum(counts.values()) < _MAX_SAMPLES_PER_STEP:
            chain = _thread_chain(self.main_ident)
            counts[_trim(chain, _STACK_DEPTH), chain] += 1

    def _sample_ordinary(self, step: int) -> None:
        """Where a step that is not (yet) long is: kept once it ends ordinary (``_settle``)."""
        at, chains = self._pending
        if at != step:
            at, chains = step, []
            self._pending = (at, chains)
        if len(chains) < _ORDINARY_PER_STEP and sum(self.ordinary.values()) < _MAX_ORDINARY:
            chain = _thread_chain(self.main_ident)
            if chain:
                chains.append(chain)

    def _settle(self, step: int, typical: float) -> None:
        """The pending step's samples join ``ordinary`` once it has ended (``step`` is under
        way) without being sampled long, and under ``_ORDINARY_MAX_RATIO`` times ``typical``."""
        at, chains = self._pending
        if at == step or not chains:
            return
        clock = self.session.clock
        i = at - 1
        if min(len(clock.step_s), len(clock.data_wait_s), len(clock.core_wait_s)) <= i:
            return  # the script's thread is still writing that step's readings
        self._pending = (0, [])
        if at in self.samples:
            return
        net = _net(clock.step_s[: i + 1], clock.data_wait_s, clock.core_wait_s, last=1)
        if net and net[-1] <= _ORDINARY_MAX_RATIO * typical:
            self.ordinary.update(chains)
            self.ordinary_steps += 1

    def _notice_no_step(self) -> None:
        after = self.session.options.no_step_notice_s
        if self.noticed or perf_counter() - self._started < after:
            return
        self.noticed = True
        where = thread_user_stack(self.main_ident, 1)
        at = f"; the script is at {where[0]}" if where else ""
        print(
            f"torchdoctor: no step seen after {after:.0f} s (no optimizer.step(), backward(), "
            f"DataLoader batch or torchdoctor.step()){at}. Still watching; mark each iteration "
            "with torchdoctor.step() if this loop is the one to measure.",
            file=sys.stderr,
            flush=True,
        )

    def _watch_memory(self) -> None:
        prof = self.session.profiler
        start = prof.rss_at_start
        if start is None or not prof.recording:
            return
        now = rss_bytes()
        if now is None:
            return
        growth = now - start
        self.peak_window_growth = max(self.peak_window_growth, growth)
        if growth >= prof.budget_bytes:
            prof.request_stop(
                f"recording grew the process by {growth / 2**20:.0f} MiB, about "
                f"{prof.total_budget_bytes / 2**20:.0f} MiB once torch assembles the events "
                "(the budget): profiling stopped"
            )

    def record(self) -> MonitorRecord:
        """Sampled long steps for ``run.json``: step -> the user stacks seen, most frequent first;
        and every step's wait for a core and CPU time run (ms, None where unknown), as
        ``steps.step_ms``."""
        clock = self.session.clock
        return MonitorRecord(
            interval_s=self.interval_s,
            source=self.sampled_source,
            long_step_samples={
                str(step): [
                    {"stack": list(stack), "samples": k, "chain": chain_key(chain)}
                    for (stack, chain), k in counts.most_common(5)
                ]
                for step, counts in sorted(self.samples.items())
            },
            ordinary_chains={chain_key(c): k for c, k in self.ordinary.most_common(50)},
            ordinary_steps=self.ordinary_steps,
            step_core_wait_ms=_ms(clock.core_wait_s),
            step_run_ms=None if (runs := getattr(clock, "run_s", None)) is None else _ms(runs),
            no_step_notice=self.noticed,
        )


def _ms(seconds: Iterable[float]) -> list[float | None]:
    """Seconds as ms for ``run.json`` (None where unknown: NaN)."""
    return [None if math.isnan(x) else round(x * 1e3, 3) for x in seconds]
