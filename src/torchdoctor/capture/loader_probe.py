"""What one batch really costs to make: items read and collated in the training process, timed,
after the script's steps are over (so nothing the probe reads or draws changes the run).

The estimate "step time x workers / batch size" holds only while every worker is busy; with
idle workers it blames items that cost microseconds. This reads a few batches of the loader's
own dataset through its own ``collate_fn`` and times them.
"""

from __future__ import annotations

import time
from typing import Any


def time_batches(loader: Any, max_batches: int = 3, budget_s: float = 0.5) -> dict[str, Any] | None:
    """``{"batches", "items", "batch_ms", "item_ms"}`` measured in this process (the median
    batch), or None for an iterable dataset or a loader without a batch size."""
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
    deadline = time.perf_counter() + budget_s
    for b in range(max_batches):
        idx = [(b * batch + i) % n for i in range(batch)]
        t0 = time.perf_counter()
        collate([dataset[i] for i in idx])
        times.append(time.perf_counter() - t0)
        if time.perf_counter() > deadline:
            break
    times.sort()
    ms = times[len(times) // 2] * 1e3
    return {
        "batches": len(times),
        "items": len(times) * batch,
        "batch_ms": ms,
        "item_ms": ms / batch,
    }
