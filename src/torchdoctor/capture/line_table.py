"""Where the measured steps' wall time goes, by the user's own source line.

Each sample (``capture/sampler.py``) stands for the wall time since the previous one. That time
goes to the sample's innermost user frame (**self**) and to every distinct user line on its
stack (**inclusive**), split by what ran under it:

- ``torch ops``: a top-level torch operator of the training thread was running (the profiler's
  events of the same window, aligned to the sampler's clock), whatever the CPU did meanwhile;
- ``gc``: a garbage collection was running;
- ``I/O`` when the thread sat in a file or socket system call (read, write, open, fsync, send,
  recv), or ran inside a transfer that moved at least 64 KiB (page-cache copies run on the CPU);
- ``sleep/wait`` in a sleep, a futex (locks, queues, joins) or a poll, less the share of the
  interval the thread's CPU clock says it ran (a loop caught waiting for the GIL is ``Python``);
- otherwise ``Python`` (interpreted code, or C code outside torch operators). Where ``/proc``
  cannot tell, the interval's CPU time of the thread is ``Python`` and the rest is ``I/O`` when
  bytes moved, else ``sleep/wait``.

Each row also says which library call its self time was in (``calls``: ``owner|qualname``
of the library frame the line called, ``""`` for the line's own Python or the operators it
called directly, ``"?"`` where the sample did not say), so a rule can tell the model's forward,
backward and optimizer from a ``copy.deepcopy`` or a ``state_dict`` made every step.

Before any of these, the time the thread spent runnable but waiting for a CPU (the scheduler's
run-queue wait) is ``CPU contention``: other processes, or too many threads of our own, held the
cores.

Plain data in (columns), plain data out (``run.json``'s ``lines``); no torch import.
"""

from __future__ import annotations

import bisect
import linecache
from array import array
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Literal

from torchdoctor.capture.sampler import (
    OURS_FLAG,
    STATE_IO,
    STATE_RUNNING,
    STATE_SLEEP,
    STATE_WAIT,
    Samples,
)

Category = Literal["torch ops", "Python", "I/O", "sleep/wait", "gc", "CPU contention"]
CATEGORIES: tuple[Category, ...] = (
    "torch ops",
    "Python",
    "I/O",
    "sleep/wait",
    "gc",
    "CPU contention",
)
MAX_ROWS = 25
MAX_CALLS = 12
NO_USER_FRAME = "(no frame of yours)"


@dataclass(frozen=True)
class OpIntervals:
    """Top-level operators of the training thread: start and end (``perf_counter_ns``), name."""

    start_ns: list[int]
    end_ns: list[int]
    names: list[str]

    def at(self, t_ns: int) -> str | None:
        """The operator running at ``t_ns``, or None."""
        i = bisect.bisect_right(self.start_ns, t_ns) - 1
        if i >= 0 and self.end_ns[i] >= t_ns:
            return self.names[i]
        return None


IO_RUN_BYTES = 1 << 16
"""A sample interval that moved this many bytes through system calls ends a transfer: the
samples before it at the same stack, on the CPU inside that system call (a page-cache copy
shows as running, not as a system call), count as I/O too."""


def _split(
    dt: int, cpu_dt: int, state: int, io_dt: int, gc_on: bool, op: str | None
) -> list[tuple[Category, int]]:
    if gc_on:
        return [("gc", dt)]
    if op is not None:
        return [("torch ops", dt)]
    if state == STATE_IO:
        return [("I/O", dt)]
    if state in (STATE_SLEEP, STATE_WAIT):
        # Asleep or in a futex at the sample, but the thread's CPU clock says how much of the
        # interval it ran: a Python loop caught waiting for the GIL (our sampler holds it for a
        # moment) ran nearly all of it; a lock or a sleep ran none of it.
        if cpu_dt > 0:
            on = min(dt, cpu_dt)
            return [("Python", on), ("sleep/wait", dt - on)]
        return [("sleep/wait", dt)]
    if state == STATE_RUNNING or cpu_dt < 0:
        # Runnable at the sample (on a CPU or waiting for one on a busy machine), or no CPU
        # clock on this platform: the interval counts as running.
        return [("Python", dt)]
    on = min(dt, cpu_dt)
    off = dt - on
    return [("Python", on), ("I/O" if io_dt > 0 else "sleep/wait", off)]


def _io_runs(samples: Samples, in_op: list[bool]) -> list[bool]:
    """Samples inside a transfer that ended with ``IO_RUN_BYTES`` or more (see above)."""
    n = len(samples)
    out = [False] * n
    io = samples.io_bytes
    i = n - 1
    while i > 0:
        moved = io[i] - io[i - 1] if io[i] >= 0 and io[i - 1] >= 0 else 0
        if moved >= IO_RUN_BYTES and not in_op[i]:
            stack = samples.stack[i]
            j = i
            while j >= 0 and samples.stack[j] == stack and not in_op[j]:
                out[j] = True
                j -= 1
            i = j
        i -= 1
    return out


class _Acc:
    """Per-site accumulators (nanoseconds)."""

    def __init__(self) -> None:
        self.self_ns: dict[str, int] = defaultdict(int)
        self.incl_ns: dict[str, int] = defaultdict(int)
        self.under: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.ops: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.leaf: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.entry: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.func: dict[str, str] = {}
        self.total: dict[str, int] = defaultdict(int)
        self.op_total: dict[str, int] = defaultdict(int)
        self.python_by_owner: dict[str, int] = defaultdict(int)


def build_line_table(
    samples: Samples, ops: OpIntervals | None, steps: int, step_ms: float | None
) -> dict[str, Any]:
    """The ``lines`` section of ``run.json``: per-line self and inclusive time (ms per step and
    share of the sampled time), what ran under each line, and the window's category totals."""
    n = len(samples)
    if n == 0 or steps <= 0:
        return {"samples": n, "rows": [], "categories": {}, "errors": list(samples.errors)}
    acc = _Acc()
    op_at = [ops.at(t) if ops is not None else None for t in samples.t_ns]
    io_run = _io_runs(samples, [o is not None for o in op_at])
    states = samples.state if len(samples.state) == n else array("b", bytes(n))
    prev_t, prev_cpu, prev_io = samples.start_ns, None, None
    runq = samples.runq_ns if len(samples.runq_ns) == n else array("q", [-1] * n)
    waits = _run_queue_waits(samples.t_ns, runq, samples.start_ns)
    for i in range(n):
        t, cpu, io = samples.t_ns[i], samples.cpu_ns[i], samples.io_bytes[i]
        dt = max(0, t - prev_t)
        waited = waits[i]
        cpu_dt = -1 if cpu < 0 or prev_cpu is None or prev_cpu < 0 else max(0, cpu - prev_cpu)
        if prev_cpu is None and cpu >= 0:
            cpu_dt = dt  # the first interval has no CPU reading before it
        io_dt = 0 if io < 0 or prev_io is None or prev_io < 0 else io - prev_io
        prev_t, prev_cpu, prev_io = t, cpu, io
        if samples.flags[i] & OURS_FLAG:
            continue  # our own bookkeeping (the step clock leaves it out of the step too)
        op = op_at[i]
        state = STATE_IO if io_run[i] else states[i]
        parts = _split(dt - waited, cpu_dt, state, io_dt, bool(samples.flags[i] & 1), op)
        if waited:
            parts.append(("CPU contention", waited))
        _add(acc, samples, i, dt, parts, op)
    sampled_ns = sum(acc.total.values())
    return _table(acc, samples, sampled_ns, steps, step_ms)


def _run_queue_waits(t_ns: array[int], runq: array[int], start_ns: int) -> list[int]:
    """ns of each sample's interval the thread waited for a core. The kernel adds a wait to the
    thread's counter when the wait ends (the thread gets a core), so a wait longer than the
    interval it ended in began in the intervals before it: the part beyond goes back to them,
    latest first (the thread waited right up to the moment it ran). Clipping it to its own
    interval lost most of the wait on a machine busy for seconds: a healthy control read as
    unexplained time."""
    n = len(t_ns)
    out, carry = [0] * n, 0
    for i in range(n - 1, -1, -1):
        dt = max(0, t_ns[i] - (t_ns[i - 1] if i else start_ns))
        known = i > 0 and runq[i] >= 0 and runq[i - 1] >= 0
        total = carry + (max(0, runq[i] - runq[i - 1]) if known else 0)
        out[i] = min(dt, total)
        carry = total - out[i]
    return out


def _add(
    acc: _Acc,
    samples: Samples,
    i: int,
    dt: int,
    parts: list[tuple[Category, int]],
    op: str | None,
) -> None:
    stack = samples.stacks[samples.stack[i]]
    leaf = samples.leaves[samples.leaf[i]]
    entry = samples.entries[samples.entry[i]] if i < len(samples.entry) else "?"
    for cat, ns in parts:
        acc.total[cat] += ns
        if cat == "Python":
            acc.python_by_owner[leaf] += ns
    if op is not None:
        acc.op_total[op] += dt
    if not stack:
        site = NO_USER_FRAME
        acc.func.setdefault(site, "")
        sites = [site]
    else:
        site = f"{stack[0][0]}:{stack[0][1]}"
        for file, line, func in stack:
            acc.func.setdefault(f"{file}:{line}", func)
        sites = list(dict.fromkeys(f"{f}:{ln}" for f, ln, _ in stack))
    acc.self_ns[site] += dt
    for cat, ns in parts:
        acc.under[site][cat] += ns
    if op is not None:
        acc.ops[site][op] += dt
    acc.leaf[site][leaf] += dt
    acc.entry[site][entry] += dt
    for s in sites:
        acc.incl_ns[s] += dt


def _table(
    acc: _Acc, samples: Samples, sampled_ns: int, steps: int, step_ms: float | None
) -> dict[str, Any]:
    sampled_ms = sampled_ns / 1e6
    per_step = step_ms if step_ms else sampled_ms / steps
    scale = per_step / sampled_ns if sampled_ns else 0.0  # ns of samples -> ms per step

    def ms(ns: float) -> float:
        return round(ns * scale, 4)

    def share(ns: float) -> float:
        return round(ns / sampled_ns, 4) if sampled_ns else 0.0

    order = sorted(acc.incl_ns, key=lambda s: (-acc.self_ns.get(s, 0), -acc.incl_ns[s]))
    rows = []
    for site in order[:MAX_ROWS]:
        rows.append(
            {
                "site": site,
                "function": acc.func.get(site, ""),
                "code": _source(site),
                "self_ms": ms(acc.self_ns.get(site, 0)),
                "self_share": share(acc.self_ns.get(site, 0)),
                "inclusive_ms": ms(acc.incl_ns[site]),
                "inclusive_share": share(acc.incl_ns[site]),
                "under": {c: ms(v) for c, v in _desc(acc.under.get(site, {}))},
                "ops": [[name, ms(v)] for name, v in _desc(acc.ops.get(site, {}))[:5]],
                "python_in": [[name, ms(v)] for name, v in _desc(acc.leaf.get(site, {}))[:4]],
                "calls": [[name, ms(v)] for name, v in _desc(acc.entry.get(site, {}))[:MAX_CALLS]],
            }
        )
    modes = {
        name: round(sum(1 for f in samples.flags if f & (1 << bit)) / len(samples), 4)
        for bit, name in enumerate(samples.modes, 1)
    }
    return {
        "samples": len(samples),
        "interval_s": samples.interval_s,
        "steps": steps,
        "sampled_ms": round(sampled_ms, 3),
        "ms_per_step": round(per_step, 4),
        "categories": {c: ms(acc.total.get(c, 0)) for c in CATEGORIES},
        "category_shares": {c: share(acc.total.get(c, 0)) for c in CATEGORIES},
        "ops": [[name, ms(v)] for name, v in _desc(acc.op_total)[:10]],
        "python_by_owner": {name: ms(v) for name, v in _desc(acc.python_by_owner)},
        "gc_ms_per_step": round(samples.gc_ns / 1e6 / steps, 4),
        "gc_collections": {str(k): v for k, v in sorted(samples.gc_collections.items())},
        "modes_on_share": modes,
        "rows": rows,
        "errors": list(samples.errors),
        "sampler_cpu_ms_per_step": round(samples.own_cpu_ns / 1e6 / steps, 4),
    }


def _desc(d: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(((k, v) for k, v in d.items() if v > 0), key=lambda kv: -kv[1])


def _source(site: str) -> str:
    if site == NO_USER_FRAME:
        return ""
    file, _, line = site.rpartition(":")
    try:
        return linecache.getline(file, int(line)).strip()[:160]
    except (ValueError, OSError):
        return ""
