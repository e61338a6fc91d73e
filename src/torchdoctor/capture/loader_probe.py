"""What one batch really costs to make: items read and collated in the training process, timed,
after the script's steps are over (so nothing the probe reads or draws changes the run).

The estimate "step time x workers / batch size" holds only while every worker is busy; with
idle workers it blames items that cost microseconds. This reads a few batches of the loader's
own dataset through its own ``collate_fn`` and times them, and says how much of that time the
thread ran, net of its waits for a core (``on_cpu_share``): items that sleep or wait on I/O
leave the CPU free, and workers beyond the cores overlap their waits; items that compute do not.
"""

from __future__ import annotations

import time
from typing import Any


def time_batches(loader: Any, max_batches: int = 3, budget_s: float = 0.5) -> dict[str, Any] | None:
    """``{"batches", "items", "batch_ms", "item_ms", "on_cpu_share"}`` measured in this process
    (the median batch; ``on_cpu_share``: the share of the batches' time that the thread ran,
    of the time it did not wait for a core; at most 1), or None for an iterable dataset or a
    loader without a batch size."""
    dataset: Any = getattr(loader, "dataset", None)
    batch = getattr(loader, "batch_size", None)
    try:
        n = len(dataset)
    except Exception:
        return None
    if not batch or not n or not hasattr(dataset, "__getitem__"):
        return None
    collate = getattr(loader, "collate_fn", None) or (lambda items: items)
    times: list[float] = []
    cpu0 = _thread_times()
    deadline = time.perf_counter() + budget_s
    for b in range(max_batches):
        idx = [(b * batch + i) % n for i in range(batch)]
        t0 = time.perf_counter()
        collate([dataset[i] for i in idx])
        times.append(time.perf_counter() - t0)
        if time.perf_counter() > deadline:
            break
    ran, waited = (b - a for a, b in zip(cpu0, _thread_times(), strict=True))
    # of the time the thread did not wait for a core, the share it ran: a loaded machine's
    # run-queue waits (every wake-up from a sleep waits for a core) are neither computing nor
    # the item's own waiting
    off_queue = sum(times) - waited
    on_cpu = ran / off_queue if off_queue > 0 else 1.0
    times.sort()
    ms = times[len(times) // 2] * 1e3
    return {
        "batches": len(times),
        "items": len(times) * batch,
        "batch_ms": ms,
        "item_ms": ms / batch,
        "on_cpu_share": round(min(1.0, max(0.0, on_cpu)), 4),
    }


def _thread_times() -> tuple[float, float]:
    """(seconds this thread ran, seconds it was runnable but waited for a core): its CPU clock,
    exact (the scheduler's own run counter for a running thread lags up to a tick: a batch of
    0.1 ms read as never on a CPU), and the scheduler's run-queue counter (0 where it cannot be
    read)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            waited = int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        waited = 0.0
    return time.thread_time(), waited
