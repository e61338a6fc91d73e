"""The profiled window: a ``torch.profiler.profile`` driven by the step clock, and a per-step
operator summary read from it in-process (how many operators, how small, how much GEMM)."""

from __future__ import annotations

import contextlib
import signal
import threading
import warnings
from pathlib import Path
from statistics import median
from typing import Any

from torchdoctor.analysis.op_classes import classify_op
from torchdoctor.capture.kineto_quiet import kineto_quiet
from torchdoctor.capture.options import CheckOptions
from torchdoctor.rules.thresholds import TINY_OP_THRESHOLD_US

TINY_OP_US = float(TINY_OP_THRESHOLD_US)
# A real-time signal no training script uses, to run the early stop on the main thread.
STOP_SIGNAL: int | None = getattr(signal, "SIGRTMIN", None)
if STOP_SIGNAL is not None:
    STOP_SIGNAL += 11
STOP_MEMORY_FACTOR = 6
"""Resident memory after the profiler stops / memory its recording took (torch 2.13, CPU)."""


class WindowProfiler:
    """Starts, steps, stops and exports one ``torch.profiler`` window."""

    def __init__(self, options: CheckOptions) -> None:
        self.options = options
        self.prof: Any = None
        self.stopped = False
        self.steps_recorded = 0
        self.with_cuda = False
        self._warmup = 0
        self.rss_at_start: int | None = None
        """Resident bytes when recording began (None when not recording or unknown)."""
        self.total_budget_bytes = int(options.profile_memory_budget_mb * 2**20)
        self.budget_bytes = self.total_budget_bytes // STOP_MEMORY_FACTOR
        """What recording may add to resident memory (the budget, less torch's stop)."""
        self.stopped_early: str | None = None
        """Why recording ended before the requested steps (the memory budget), if it did."""
        self._stop_requested: str | None = None
        self._signal_installed = False
        self._previous_handler: Any = None
        self._main_ident = threading.main_thread().ident
        self._events: Any = None

    @property
    def recording(self) -> bool:
        """A session is recording now."""
        return self.prof is not None and not self.stopped

    def start(self, profiler_warmup_steps: int) -> None:
        """Start profiling; the first ``profiler_warmup_steps`` steps are discarded."""
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        # is_initialized first: is_available() would start the CUDA driver in a CPU-only script
        # on a GPU machine (and break its forked children); a script that used CUDA initialised it.
        self.with_cuda = torch.cuda.is_initialized() and torch.cuda.is_available()
        if self.with_cuda:
            activities.append(ProfilerActivity.CUDA)
        with warnings.catch_warnings():
            # With fewer than two warm-up steps the profiler gets none of its own, by request.
            warnings.filterwarnings("ignore", message=".*won't be using warmup")
            self.prof = self._profile(profile, schedule, activities, profiler_warmup_steps)
        self._warmup = profiler_warmup_steps
        self.stopped, self.steps_recorded, self._events = False, 0, None
        self.stopped_early = self._stop_requested = None
        self._set_budget()
        self._install_stop_signal()
        with kineto_quiet():
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

    def _set_budget(self) -> None:
        """What the recording may add to resident memory: the option, and never more than a
        quarter of the memory still available."""
        from torchdoctor.capture.monitor import available_bytes, rss_bytes

        self.rss_at_start = rss_bytes()
        budget = int(self.options.profile_memory_budget_mb * 2**20)
        free = available_bytes()
        total = min(budget, free // 4) if free else budget
        # What recording may grow by: torch assembles its events when the profiler stops, and
        # that takes about six times what recording took (torch 2.13, 400k small operators:
        # +0.48 GB while recording, +2.9 GB after stop).
        self.budget_bytes = total // STOP_MEMORY_FACTOR
        self.total_budget_bytes = total

    def step(self) -> None:
        """Close one step (a ``ProfilerStep#N`` range in the trace); end the window at this
        step boundary when the next step would take the recording past its memory budget."""
        if self.prof is None or self.stopped:
            return
        with kineto_quiet():  # the schedule starts and stops Kineto's session inside step()
            self.prof.step()
        self.steps_recorded += 1
        if self._stop_requested:
            self.stop_early(self._stop_requested)
            return
        from torchdoctor.capture.monitor import rss_bytes

        now = rss_bytes()
        if now is None or self.rss_at_start is None:
            return
        growth = now - self.rss_at_start
        per_step = growth / self.steps_recorded
        if self.steps_recorded > self._warmup and growth + per_step > self.budget_bytes:
            self.stop_early(
                f"the window was shortened: each step's recording took about "
                f"{per_step / 2**20:.0f} MiB, about {STOP_MEMORY_FACTOR * per_step / 2**20:.0f} "
                f"MiB once torch assembles it (budget {self.total_budget_bytes / 2**20:.0f} MiB)"
            )

    def request_stop(self, reason: str) -> None:
        """From another thread: stop recording on the main thread as soon as it runs Python
        again (the profiler can only be stopped on the thread that started it). A signal
        handler runs there between two bytecodes, so even a step of a million operators with
        no model call stops within microseconds; without it (not the main thread, no
        signals) the next step boundary stops it."""
        if self._stop_requested or not self.recording:
            return
        self._stop_requested = reason
        if self._signal_installed:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                signal.pthread_kill(self._main_ident, STOP_SIGNAL)  # type: ignore[arg-type]

    def _install_stop_signal(self) -> None:
        self._signal_installed = False
        if STOP_SIGNAL is None or threading.current_thread() is not threading.main_thread():
            return
        try:
            self._previous_handler = signal.signal(STOP_SIGNAL, self._on_signal)
            self._signal_installed = True
        except (OSError, ValueError):
            pass

    def _remove_stop_signal(self) -> None:
        if self._signal_installed and threading.current_thread() is threading.main_thread():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(STOP_SIGNAL, self._previous_handler or signal.SIG_DFL)  # type: ignore[arg-type]
            self._signal_installed = False

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._stop_requested:
            self.stop_early(self._stop_requested)

    def stop_early(self, reason: str) -> None:
        """Stop recording now and keep what was recorded, saying why."""
        if self.recording:
            self.stopped_early = reason
            self.stop()

    def stop(self) -> None:
        """Stop recording (idempotent)."""
        self._remove_stop_signal()
        if self.prof is not None and not self.stopped:
            self.stopped = True
            with kineto_quiet():
                self.prof.stop()

    def abort(self) -> None:
        """Stop and forget what was recorded (the step signal changed under it)."""
        import gc

        self.stop()
        self.prof, self.stopped, self.steps_recorded, self._events = None, False, 0, None
        # Free the discarded session now, before another one starts: torch's profiler objects
        # sit in reference cycles, and a garbage collection that frees their results while a
        # later session records or is read crashes (a segfault in ~vector<KinetoEvent>,
        # torch 2.13, seen when the step signal switched from batches to optimizer steps).
        gc.collect()

    @property
    def active_steps(self) -> int:
        """Complete steps recorded after the profiler's own warm-up."""
        return max(0, min(self.steps_recorded - self._warmup, self.options.profile_steps))

    def budget_record(self) -> dict[str, Any]:
        """The memory budget of the window and whether recording stopped on it."""
        return {
            "memory_budget_mib": round(self.total_budget_bytes / 2**20, 1),
            "recording_budget_mib": round(self.budget_bytes / 2**20, 1),
            "stopped_early": self.stopped_early,
            "steps_recorded": self.active_steps,
        }

    def export(self, path: Path) -> Path | None:
        """Write the Chrome trace (gzip when ``path`` ends in ``.gz``); ``None`` if no window."""
        if self.prof is None:
            return None
        self.stop()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.prof.export_chrome_trace(str(path))
        return path

    def op_summary(self, trace: Path | None = None) -> dict[str, Any] | None:
        """Per-step operator statistics from the recorded window: read from the exported
        ``trace`` when there is one (``capture/trace_ops.py``: a few hundred bytes per event),
        else from the profiler's events (``summarise_ops``: torch builds a Python object of
        about 15 kB per operator, 3 GB for 200k operators)."""
        partial = self.active_steps == 0 and self.stopped_early is not None
        if self.prof is None or (self.active_steps == 0 and not partial):
            return None
        self.stop()
        steps = max(1, self.active_steps)
        if trace is not None and trace.is_file():
            from torchdoctor.capture.trace_ops import summarise_trace

            out = summarise_trace(trace, steps)
        elif partial:
            return None  # the events of a window stopped on its budget are not built again
        else:
            out = summarise_ops(self.prof.events(), steps)
        if partial:
            out["partial_step"] = True  # recording stopped inside the first profiled step
        return out

    def events(self) -> Any:
        """The recorded window's events (``FunctionEvent`` list, read once); None if none, or
        when recording stopped on its memory budget (torch would build about 15 kB of Python
        objects per operator: the exported trace is read instead)."""
        if self.prof is None or self.active_steps == 0 or self.stopped_early is not None:
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
    tiny ops, and what the operator time does: ``gemm_share`` (matrix multiplies and
    convolutions) and ``compute_share`` (those plus recurrent layers and attention), forward and
    backward, classified by what each operator does (``analysis/op_classes.py``); on device
    time when the window has any, else on top-level CPU time."""
    top = [e for e in events if _is_top_level(e)]
    durs = [float(e.cpu_time_total) for e in top]
    total_us = sum(durs)
    tiny_us = sum(d for d in durs if d < TINY_OP_US)
    device_total = sum(float(_self_device_us(e)) for e in events)
    by_class: dict[str, float] = {}
    if device_total > 0:
        for e in events:
            us = _self_device_us(e)
            if us:
                cls = _device_class(e.name)
                by_class[cls] = by_class.get(cls, 0.0) + us
        basis, denominator = "device", device_total
    else:
        for e, d in zip(top, durs, strict=True):
            cls = classify_op(e.name)
            by_class[cls] = by_class.get(cls, 0.0) + d
        basis, denominator = "cpu", total_us
    gemm = by_class.get("matmul", 0.0) + by_class.get("convolution", 0.0)
    compute = gemm + by_class.get("recurrent", 0.0) + by_class.get("attention", 0.0)

    def share(us: float) -> float:
        return us / denominator if denominator else 0.0

    return {
        "steps": steps,
        "top_level_ops_per_step": len(top) / steps,
        "median_op_us": median(durs) if durs else 0.0,
        "op_time_ms_per_step": total_us / steps / 1e3,
        "tiny_op_time_ms_per_step": tiny_us / steps / 1e3,
        "tiny_op_threshold_us": float(TINY_OP_US),
        "gemm_share": share(gemm),
        "compute_share": share(compute),
        "compute_ms_per_step": compute / steps / 1e3,
        "time_by_class_ms_per_step": {k: v / steps / 1e3 for k, v in sorted(by_class.items())},
        "gemm_share_basis": basis,
        "collective_time_ms_per_step": _collective_us(events, top) / steps / 1e3,
    }


def _device_class(name: str) -> str:
    """An operator's class from its name, or a kernel's from the kernel-name rules."""
    cls = classify_op(name)
    if cls != "other" or name.startswith("aten::"):
        return cls
    from torchdoctor.analysis.kernel_names import kernel_category

    kind = kernel_category(name.lower())
    return {"gemm": "matmul", "convolution": "convolution", "attention": "attention"}.get(
        kind, "other"
    )


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
    return float(getattr(event, "self_device_time_total", 0.0) or 0.0)
