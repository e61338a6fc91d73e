"""Steps timed by their boundaries alone: the clean window before any instrument starts, and
the same again after the instruments (their after-effect).

On a CPU a step is the host clock between two boundaries (the step clock's own times). On a
GPU the boundaries are CUDA events recorded on the current stream as each step ends (no
synchronisation inside the window): a step is the GPU's time between two events, and the
*host lead* of a step is how long after the CPU finished dispatching it the GPU finished it.
A GPU-bound loop dispatches ahead and the GPU trails it (lead > 0, the queue never drains);
when the GPU finishes as soon as the CPU is done, or before (a sync in the step), it waited
for the host at least at the step's end. Reading the events needs one synchronisation, at the
window's end, outside every timed step; so does the reference event at its start, which ties
the GPU's clock to the host's (the GPU is idle then, so the event completes when recorded).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from torchdoctor.capture import guest


@dataclass(frozen=True)
class WindowTiming:
    """What one timed window measured (``run.json``'s ``steps.clean`` / ``steps.after``)."""

    name: str
    first_step: int
    """The window's first step (1-based)."""
    clock: str
    """``cuda-events`` (the GPU's time between step boundaries) or ``host``."""
    step_ms: tuple[float, ...]
    """Each step's time on that clock."""
    host_step_ms: tuple[float, ...]
    """Each step's host time (the step clock's, our bookkeeping left out)."""
    host_lead_ms: tuple[float, ...] = ()
    """Per step: when the GPU finished it minus when the CPU finished dispatching it (ms)."""
    error: str | None = None
    compiled_steps: tuple[int, ...] = ()
    """Steps (1-based, as the clock counts) in which a compile started: not steady steps."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``run.json``, with the median and the range."""
        ms = sorted(self.step_ms)
        out: dict[str, Any] = {
            "first_step": self.first_step,
            "steps": len(ms),
            "clock": self.clock,
            "step_ms": [round(x, 4) for x in self.step_ms],
            "host_step_ms": [round(x, 4) for x in self.host_step_ms],
            "median_ms": statistics.median(ms) if ms else None,
        }
        if self.host_lead_ms:
            out["host_lead_ms"] = [round(x, 4) for x in self.host_lead_ms]
            out["host_lead_median_ms"] = statistics.median(self.host_lead_ms)
        if self.error:
            out["error"] = self.error
        if self.compiled_steps:
            out["compiled_steps"] = list(self.compiled_steps)
        return out


def compiled_steps(
    first_step: int, wall_start: float, wall_ends: list[float], compile_starts: list[float]
) -> tuple[int, ...]:
    """The steps (1-based) in which one of ``compile_starts`` (unix s) fell."""
    out = []
    begin = wall_start
    for i, end in enumerate(wall_ends):
        if any(begin <= t < end for t in compile_starts):
            out.append(first_step + i)
        begin = end
    return tuple(out)


class TimedWindow:
    """Records one timed window's boundaries (see the module docstring).

    ``cuda``: a ``torch.cuda``-like module when the script uses a GPU, else None. Every call
    is guarded by the caller (the step clock turns an error into a clock error, never into the
    user's exception)."""

    def __init__(self, name: str, first_step: int, cuda: Any = None) -> None:
        self.name = name
        self.first_step = first_step
        self.cuda = cuda
        self._ref: Any = None
        self._ref_host = 0.0
        self._events: list[Any] = []
        self._host_end: list[float] = []
        self._error: str | None = None
        self.wall_ends: list[float] = []
        """Each step's end on the wall clock (unix s), to place compiles in steps."""
        self.wall_start = 0.0

    def start(self) -> None:
        """At the boundary before the window's first step."""
        if self.cuda is not None:
            try:
                self.cuda.synchronize()  # outside every timed step: ties the two clocks
                self._ref = self.cuda.Event(enable_timing=True)
                self._ref.record()
            except Exception as exc:  # the host clock still times the window
                guest.note(f"starting the {self.name} window's CUDA events", exc)
                self._ref, self._error = None, f"{type(exc).__name__}: {exc}"
        self._ref_host = perf_counter()
        self.wall_start = time.time()

    def step(self, host_end_s: float) -> None:
        """A step of the window ended at ``host_end_s`` (``perf_counter``)."""
        self._host_end.append(host_end_s)
        self.wall_ends.append(time.time())
        if self._ref is not None:
            try:
                event = self.cuda.Event(enable_timing=True)
                event.record()
            except Exception as exc:  # no GPU clock for this window: the host's stands
                guest.note(f"recording the {self.name} window's CUDA events", exc)
                self._ref, self._events, self._error = None, [], f"{type(exc).__name__}: {exc}"
                return
            self._events.append(event)

    def finish(self, host_step_s: list[float]) -> WindowTiming:
        """Read the window (one synchronisation on a GPU). ``host_step_s``: the step clock's
        times of the window's steps."""
        host_ms = tuple(s * 1e3 for s in host_step_s)
        if self._ref is None or not self._events:
            return WindowTiming(
                self.name, self.first_step, "host", host_ms, host_ms, (), self._error
            )
        try:
            self._events[-1].synchronize()
            ends = [self._ref.elapsed_time(e) for e in self._events]  # ms after the reference
        except Exception as exc:  # the host's times still stand
            guest.note(f"reading the {self.name} window's CUDA events", exc)
            err = f"{type(exc).__name__}: {exc}"
            return WindowTiming(self.name, self.first_step, "host", host_ms, host_ms, (), err)
        gpu_ms = tuple(b - a for a, b in zip([0.0, *ends[:-1]], ends, strict=True))
        lead = tuple(
            self._ref_host * 1e3 + end - host * 1e3
            for end, host in zip(ends, self._host_end, strict=False)
        )
        return WindowTiming(self.name, self.first_step, "cuda-events", gpu_ms, host_ms, lead)


def script_cuda() -> Any:
    """``torch.cuda`` when the script already initialised it (we never do), else None."""
    import sys

    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return torch.cuda
    except Exception:  # a broken device: the host clock times the steps
        return None
    return None


class StepEvents:
    """The clean timing of a child that runs no instrument (``compare --rerun``, ``fix
    --prove``): its measured steps timed by the same boundaries as ``check``'s clean window
    (CUDA events on a GPU, read with one synchronisation after the last step; the host clock
    on a CPU). A step clock's listener for a schedule without a clean window: its "profiled"
    steps are the measured ones, and no profiler runs. ``timing`` holds the result."""

    def __init__(self) -> None:
        self.clock: Any = None
        """The step clock this listens to (set by the child after building both)."""
        self._window: TimedWindow | None = None
        self.timing: WindowTiming | None = None

    def set_measuring(self, on: bool) -> None:
        self._window = None
        if on and self.clock is not None:
            self._window = TimedWindow("measured", self.clock.steps + 1, script_cuda())
            self._window.start()

    def window_step(self) -> None:
        w, clock = self._window, self.clock
        if w is not None and clock is not None and clock.steps >= w.first_step:
            w.step(clock.step_end_s)

    def window_end(self) -> None:
        w, self._window = self._window, None
        if w is not None and self.clock is not None:
            self.timing = w.finish(list(self.clock.step_s[w.first_step - 1 :]))

    def window_abort(self) -> None:
        self._window, self.timing = None, None

    def to_dict(self) -> dict[str, Any] | None:
        return self.timing.to_dict() if self.timing is not None else None


def measured_step_ms(doc: dict[str, Any]) -> list[float] | None:
    """A child's measured steps on the GPU's clock, when it timed them with CUDA events."""
    timed = doc.get("timed")
    if isinstance(timed, dict) and timed.get("clock") == "cuda-events":
        ms = [float(x) for x in timed.get("step_ms") or []]
        return ms or None
    return None
