"""The kernel window (GPU only): a few steps under a profiler that records CUDA activity alone.

The profiled window records every CPU operator as well, at a few microseconds each: the CPU's
dispatch slows, and the trace shows a GPU waiting for a host that, without the profiler, keeps
it busy. Kernels are recorded by CUPTI's activity buffers, which do not slow dispatch the same
way. So the GPU's busy time per step, and the kernels that fill it, are read from a window of
their own where nothing records the CPU's operators; its steps are timed by CUDA events like
the clean ones, so the report can say how much this window bent the step too.

The recording is exported to a temporary Chrome trace, summarised, and deleted: GPU activity
events (kernels, copies, fills) with their start and duration in microseconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from torchdoctor.capture.kineto_quiet import kineto_quiet

GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
TOP_KERNELS = 5


def summarise(events: Iterable[Mapping[str, Any]], steps: int) -> dict[str, Any]:
    """Per step: the GPU's busy time (union of its activity, so overlapping streams count once),
    the summed kernel time, the activity count, and the kernels that took longest."""
    spans: list[tuple[float, float]] = []
    kernel_us = 0.0
    by_name: dict[str, list[float]] = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in GPU_CATEGORIES:
            continue
        try:
            ts, dur = float(e["ts"]), float(e.get("dur") or 0.0)
        except (KeyError, TypeError, ValueError):
            continue
        spans.append((ts, ts + dur))
        if e.get("cat") == "kernel":
            kernel_us += dur
            entry = by_name.setdefault(str(e.get("name") or "?"), [0.0, 0.0])
            entry[0] += dur
            entry[1] += 1
    busy_us = 0.0
    end = float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        busy_us += b - max(a, end)
        end = b
    n = max(1, steps)
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:TOP_KERNELS]
    return {
        "steps": steps,
        "activities": len(spans),
        "gpu_busy_ms_per_step": round(busy_us / 1e3 / n, 4),
        "kernel_ms_per_step": round(kernel_us / 1e3 / n, 4),
        "span_ms": round((end - min(a for a, _ in spans)) / 1e3, 4) if spans else 0.0,
        "top_kernels": [
            {"name": name, "ms_per_step": round(us / 1e3 / n, 4), "count": int(count)}
            for name, (us, count) in top
        ],
    }


class KernelProfiler:
    """A ``torch.profiler`` session with CUDA activity only, started and stopped by the
    switchboard (``capture/switchboard.py``: the kernel window)."""

    def __init__(self) -> None:
        self.prof: Any = None
        self.summary: dict[str, Any] | None = None

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.prof = profile(activities=[ProfilerActivity.CUDA])
        with kineto_quiet():
            self.prof.start()

    def stop(self, steps: int) -> dict[str, Any] | None:
        """Stop, read the GPU's activity over ``steps`` steps, forget the recording."""
        prof, self.prof = self.prof, None
        if prof is None:
            return None
        with kineto_quiet():
            prof.stop()
        fd, name = tempfile.mkstemp(prefix="torchdoctor-kernels-", suffix=".json")
        os.close(fd)
        try:
            prof.export_chrome_trace(name)
            with open(name, encoding="utf-8") as fh:
                doc = json.load(fh)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name)
        events = doc.get("traceEvents") if isinstance(doc, dict) else doc
        self.summary = summarise(events or [], steps)
        return self.summary

    def abort(self) -> None:
        """Stop and keep nothing."""
        prof, self.prof = self.prof, None
        if prof is not None:
            with kineto_quiet():
                prof.stop()
