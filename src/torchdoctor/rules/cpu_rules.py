"""The CPU itself: runnable threads against free cores (``cpu-oversubscribed``'s family is
``rules/families/cpu_threads.py``).

The evidence is what the kernel counted during the measured steps (``run.json``'s ``cpu``:
each thread's time running and waiting for a core, the workers' CPU time, how busy the machine
was) and, when that suggests oversubscription, a short interleaved A/B measured after the steps
(``cpu.thread_probe``): the same small matmul with the script's thread count and with fewer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torchdoctor.rules import thresholds as th


@dataclass(frozen=True)
class CpuDemand:
    """Runnable threads against free cores during the measured steps."""

    threads: int
    """Intra-op threads of the training process."""
    busy_workers: float
    """Cores' worth of CPU the DataLoader workers used (workers' CPU time / wall time)."""
    other_cores: float
    """Cores' worth of CPU other processes used."""
    cores: int
    """Cores this process may run on."""

    @property
    def free_cores(self) -> float:
        """Cores left for this process and its workers."""
        return max(0.0, self.cores - self.other_cores)

    @property
    def demand(self) -> float:
        return self.threads + self.busy_workers

    @property
    def oversubscribed(self) -> bool:
        return self.threads > 1 and self.demand >= self.free_cores + th.OVERSUBSCRIBED_MARGIN

    @property
    def suggested_threads(self) -> int:
        """Intra-op threads that fit in the free cores beside the busy workers (at least 1)."""
        fit = math.floor(self.free_cores - self.busy_workers + 0.25)
        return max(1, min(self.threads - 1, fit))


def implausible_probe(probe: dict[str, Any]) -> str | None:
    """Why a thread probe's ratio is not taken as the script's (None: it may be): a slow-down
    above ``PROBE_RATIO_PER_THREAD`` per thread removed. Such ratios are real on a busy machine
    (the probe's sub-millisecond work against another process's time slice), but they say
    nothing of the script's operators (``benchmarks/bench_thread_probe_contended.py``)."""
    try:
        ratio = float(probe["ratio_median"])
        extra = max(1, int(probe["threads_a"]) - int(probe["threads_b"]))
    except (KeyError, TypeError, ValueError):
        return None
    bound = th.PROBE_RATIO_PER_THREAD * extra
    if ratio <= bound:
        return None
    return (
        f"{ratio:.1f}x slower with {probe['threads_a']} threads than with {probe['threads_b']}: "
        f"above {bound:.0f}x for {extra} thread(s) too many, its sub-millisecond work held up "
        "by time slices, not a slow-down of the script's operators; not taken"
    )


def cpu_demand(cpu: dict[str, Any]) -> CpuDemand | None:
    """Demand and supply from ``run.json``'s ``cpu`` record; None without a window."""
    wall = float(cpu.get("wall_s") or 0.0)
    if wall <= 0 or not cpu.get("intra_op_threads"):
        return None
    workers = float(cpu.get("workers_cpu_s") or 0.0) / wall
    return CpuDemand(
        threads=int(cpu["intra_op_threads"]),
        busy_workers=workers,
        other_cores=float(cpu.get("other_busy_cores") or 0.0),
        cores=int(cpu.get("cores") or 1),
    )


def contention(cpu: Any) -> str | None:
    """Why a run's step times are inflated by other work on its cores, in words, or None: the
    ``cpu`` record's main thread waited for a core long enough (``STARVED_SHARE``), or other
    processes left fewer free cores than the run's runnable threads. A malformed record: None."""
    if not isinstance(cpu, dict):
        return None
    try:
        d = cpu_demand(cpu)
        wait = cpu.get("main_thread_runqueue_wait_s")
        share = float(wait) / float(cpu["wall_s"]) if wait is not None else 0.0
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    if d is None:
        return None
    held = f"other processes kept {d.other_cores:.1f} of {d.cores} cores busy"
    if share >= th.STARVED_SHARE:
        return f"the main thread waited for a core {share:.0%} of the measured time; {held}"
    if d.other_cores >= 1.0 and d.oversubscribed:
        return f"{held}, leaving {d.free_cores:.1f} for {d.demand:.1f} runnable threads"
    return None
