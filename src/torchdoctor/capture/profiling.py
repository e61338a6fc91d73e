"""The profiled window: a ``torch.profiler.profile`` driven by the step clock, and a per-step
operator summary read from it in-process (how many operators, how small, how much GEMM)."""

from __future__ import annotations

import warnings
from pathlib import Path
from statistics import median
from typing import Any

from torchdoctor.capture.options import CheckOptions
from torchdoctor.rules.thresholds import TINY_OP_THRESHOLD_US

# Operators whose time is dominated by matrix multiplies or convolutions (tensor-core work).
GEMM_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::matmul",
        "aten::linear",
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::convolution",
        "aten::_convolution",
        "aten::scaled_dot_product_attention",
    }
)
TINY_OP_US = float(TINY_OP_THRESHOLD_US)  # one thresholds module: rules/thresholds.py


class WindowProfiler:
    """Starts, steps, stops and exports one ``torch.profiler`` window."""

    def __init__(self, options: CheckOptions) -> None:
        self.options = options
        self.prof: Any = None
        self.stopped = False
        self.steps_recorded = 0
        self.with_cuda = False
        self._warmup = 0
        self._events: Any = None

    def start(self, profiler_warmup_steps: int) -> None:
        """Start profiling; the first ``profiler_warmup_steps`` steps are discarded."""
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        self.with_cuda = torch.cuda.is_available()
        if self.with_cuda:
            activities.append(ProfilerActivity.CUDA)
        with warnings.catch_warnings():
            # With fewer than two warm-up steps the profiler gets none of its own, by request.
            warnings.filterwarnings("ignore", message=".*won't be using warmup")
            self.prof = self._profile(profile, schedule, activities, profiler_warmup_steps)
        self._warmup = profiler_warmup_steps
        self.stopped, self.steps_recorded, self._events = False, 0, None
        self.prof.start()

    def _profile(self, profile: Any, schedule: Any, activities: list[Any], warmup: int) -> Any:
        opts = self.options
        return profile(
            activities=activities,
            schedule=schedule(wait=0, warmup=warmup, active=opts.profile_steps, repeat=1),
            record_shapes=opts.record_shapes,
            with_stack=opts.with_stack,
            profile_memory=opts.profile_memory,
        )

    def step(self) -> None:
        """Close one step (a ``ProfilerStep#N`` range in the trace)."""
        if self.prof is not None and not self.stopped:
            self.prof.step()
            self.steps_recorded += 1

    def stop(self) -> None:
        """Stop recording (idempotent)."""
        if self.prof is not None and not self.stopped:
            self.stopped = True
            self.prof.stop()

    def abort(self) -> None:
        """Stop and forget what was recorded (the step signal changed under it)."""
        self.stop()
        self.prof, self.stopped, self.steps_recorded, self._events = None, False, 0, None

    @property
    def active_steps(self) -> int:
        """Steps recorded after the profiler's own warm-up."""
        return max(0, min(self.steps_recorded - self._warmup, self.options.profile_steps))

    def export(self, path: Path) -> Path | None:
        """Write the Chrome trace (gzip when ``path`` ends in ``.gz``); ``None`` if no window."""
        if self.prof is None:
            return None
        self.stop()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.prof.export_chrome_trace(str(path))
        return path

    def op_summary(self) -> dict[str, Any] | None:
        """Per-step operator statistics from the recorded window (see ``summarise_ops``)."""
        events = self.events()
        if events is None:
            return None
        return summarise_ops(events, self.active_steps)

    def events(self) -> Any:
        """The recorded window's events (``FunctionEvent`` list, read once); None if none."""
        if self.prof is None or self.active_steps == 0:
            return None
        self.stop()
        if self._events is None:
            self._events = self.prof.events()
        return self._events


def _is_top_level(event: Any) -> bool:
    """An aten op called from Python, not from another op and not by the DataLoader (batch
    assembly is input time, reported as data wait)."""
    if not event.name.startswith("aten::"):
        return False
    parent = event.cpu_parent
    if parent is not None and parent.name.startswith("aten::"):
        return False
    while parent is not None:
        if parent.name.startswith("enumerate(DataLoader)"):
            return False
        parent = parent.cpu_parent
    return True


def summarise_ops(events: Any, steps: int) -> dict[str, Any]:
    """Top-level operators per step, their median CPU duration (us), the share of their time in
    tiny ops, and the share of operator time in GEMM/convolution ops (device time if any)."""
    top = [e for e in events if _is_top_level(e)]
    durs = [float(e.cpu_time_total) for e in top]
    total_us = sum(durs)
    tiny_us = sum(d for d in durs if d < TINY_OP_US)
    device_total = sum(float(_self_device_us(e)) for e in events)
    if device_total > 0:
        gemm = sum(_self_device_us(e) for e in events if _is_gemm_family(e))
        gemm_share, basis = gemm / device_total, "device"
    else:
        gemm = sum(float(e.cpu_time_total) for e in top if e.name in GEMM_OPS)
        gemm_share, basis = (gemm / total_us if total_us else 0.0), "cpu"
    return {
        "steps": steps,
        "top_level_ops_per_step": len(top) / steps,
        "median_op_us": median(durs) if durs else 0.0,
        "op_time_ms_per_step": total_us / steps / 1e3,
        "tiny_op_time_ms_per_step": tiny_us / steps / 1e3,
        "tiny_op_threshold_us": float(TINY_OP_US),
        "gemm_share": gemm_share,
        "gemm_share_basis": basis,
        "collective_time_ms_per_step": _collective_us(events, top) / steps / 1e3,
    }


def _collective_us(events: Any, top: list[Any]) -> float:
    """Time inside collectives (``c10d::``/``gloo:``... ranges, on any thread: with gloo the
    transfer runs on the backend's thread while the training thread waits outside any op) that
    no top-level operator overlaps: waiting for other ranks, which is never Python overhead."""
    import numpy as np

    from torchdoctor.analysis import intervals as iv
    from torchdoctor.analysis.gpu_activity import is_cpu_collective

    def spans(evs: list[Any]) -> iv.Intervals:
        r = [(float(e.time_range.start), float(e.time_range.end)) for e in evs]
        arr = np.array(r, dtype=np.float64).reshape(-1, 2)
        return iv.union(arr[:, 0], arr[:, 1])

    coll = spans([e for e in events if is_cpu_collective(e.name)])
    return iv.total(iv.subtract(coll, spans(top)))


def _self_device_us(event: Any) -> float:
    value = getattr(event, "self_device_time_total", None)
    if value is None:  # torch < 2.4 named it after CUDA
        value = getattr(event, "self_cuda_time_total", 0.0)
    return float(value or 0.0)


def _is_gemm_family(event: Any) -> bool:
    name = event.name
    return name in GEMM_OPS or "gemm" in name.lower() or "conv" in name.lower()
