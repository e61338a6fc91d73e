"""Brute-force helpers over a trace parsed with the json module (independent of the loader)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
KERNEL_CATS = {"kernel", "Kernel"}
LAUNCH_CATS = {"cuda_runtime", "Runtime", "cuda_driver"}


def events(trace: dict[str, Any], cats: set[str]) -> list[dict[str, Any]]:
    """Complete events of the given categories."""
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in cats]


def per_name(evs: list[dict[str, Any]]) -> dict[str, tuple[int, float]]:
    """name -> (count, summed duration in µs)."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in evs:
        out[e["name"]][0] += 1
        out[e["name"]][1] += e["dur"]
    return {k: (int(v[0]), v[1]) for k, v in out.items()}


def corr(e: dict[str, Any]) -> Any:
    return e.get("args", {}).get("correlation")
