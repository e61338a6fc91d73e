"""One side of ``compare --rerun`` in a fresh process: the user's script under ``check``'s step
clock, without the profiler, stopped after its warm-up and measured steps (or run to its end).

``python -m torchdoctor.compare.rerun_child SPEC.json`` reads the script, its arguments and the
step counts from SPEC, and writes what it measured to the spec's ``result_path``:

- ``step_ms``: every step's wall time, from ``check``'s clock (optimizer steps, DataLoader
  batches or ``torchdoctor.step()`` markers, the strongest signal wins), warm-up included;
- ``t_begin``, ``t_measure``, ``t_window_end``, ``t_end``: ``time.monotonic()`` when the clock
  started, when the warm-up ended, when the measured steps ended and when the script returned.
  The parent reads the same system-wide clock before it starts the process, so start-up (the
  interpreter, torch's import) counts too. ``t_measure`` and ``t_window_end`` are taken after a
  device synchronisation when the script uses CUDA, so queued work is inside the window;
- ``timed``: the measured steps timed as ``check`` times its clean window (CUDA events at
  step boundaries on a GPU, ``capture/timed_window.py: StepEvents``); the parent takes the
  steady steps from it when they are on the GPU's clock;
- ``compile_s``: torch.compile's compile time (dynamo's own metrics);
- ``loaders``: each DataLoader's batch size, dataset length and worker settings.
"""

from __future__ import annotations

import time

_T_IMPORTED = time.monotonic()  # before torch: the parent's clock and ours are the same

import json  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

from torchdoctor.capture.clock import QuietListener  # noqa: E402
from torchdoctor.capture.timed_window import StepEvents  # noqa: E402


def _sync_device() -> None:
    """Wait for queued CUDA work, when the script started CUDA (we never initialise it)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:  # a broken device must not break the measurement of the host side
        pass


class _Marks(StepEvents, QuietListener):
    """The clock's listener: no profiler; the two instants the steady window needs, and the
    measured steps timed as ``check`` times its clean window (``capture/timed_window.py``)."""

    def __init__(self) -> None:
        super().__init__()
        self.t_measure: float | None = None
        self.t_window_end: float | None = None

    def window_start(self, profiler_warmup_steps: int) -> None:
        """No profiler in a rerun."""

    def window_end(self) -> None:
        """The measured steps are done: their queued device work is part of them."""
        _sync_device()
        self.t_window_end = time.monotonic()
        super().window_end()

    def window_abort(self) -> None:
        """The step signal changed: the marks restart with the new count."""
        self.t_measure = self.t_window_end = None
        super().window_abort()

    def set_measuring(self, on: bool) -> None:
        """The warm-up ended (on): the steady window starts here."""
        if on:
            _sync_device()
            self.t_measure = time.monotonic()
        else:
            self.t_measure = None
        super().set_measuring(on)


def _compile_s() -> tuple[int, float]:
    """Compiles and their seconds, from dynamo's metrics (none if torch._dynamo never loaded)."""
    if "torch._dynamo" not in sys.modules:
        return 0, 0.0
    try:
        from torch._dynamo.utils import get_compilation_metrics

        metrics = list(get_compilation_metrics())
    except Exception:
        return 0, 0.0
    seconds = 0.0
    for m in metrics:
        d = getattr(m, "entire_frame_compile_time_s", None)
        us = getattr(m, "duration_us", None)
        if d is None and us is not None:
            d = float(us) / 1e6
        seconds += float(d or 0.0)
    return len(metrics), seconds


def _loaders(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    keys = ("batch_size", "dataset_len", "num_workers", "persistent_workers")
    return [{k: d.get(k) for k in keys} for d in snapshot.get("dataloaders", [])]


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the spec's script under the step clock; returns the result document."""
    from torchdoctor.capture import markers
    from torchdoctor.capture.clock import StepClock
    from torchdoctor.capture.hooks import StepHooks
    from torchdoctor.capture.options import CheckOptions
    from torchdoctor.capture.runner import run_script

    # No profiler in a rerun: the measured steps are the clean ones (no window of their own).
    opts = CheckOptions(
        warmup_steps=int(spec["warmup"]),
        profile_steps=int(spec["steps"]),
        clean_steps=0,
        full=spec["full"],
    )
    marks = _Marks()
    clock = StepClock(opts, marks)
    marks.clock = clock
    hooks = StepHooks(clock)
    hooks.install()
    markers.set_clock(clock)
    t_begin = time.monotonic()
    clock.begin()
    try:
        outcome = run_script(spec["script"], list(spec["args"]))
    finally:
        markers.set_clock(None)
        hooks.uninstall()
    _sync_device()
    t_end = time.monotonic()
    compiles, compile_s = _compile_s()
    return {
        "status": outcome.status,
        "code": outcome.code,
        "exception": outcome.to_dict()["exception"],
        "source": clock.source,
        "warmup_steps": opts.warmup_steps,
        "step_ms": [s * 1e3 for s in clock.step_s],
        "timed": marks.to_dict(),
        "t_imported": _T_IMPORTED,
        "t_begin": t_begin,
        "t_measure": marks.t_measure,
        "t_window_end": marks.t_window_end,
        "t_end": t_end,
        "compiles": compiles,
        "compile_s": compile_s,
        "loaders": _loaders(hooks.snapshot()),
        "clock_errors": list(clock.errors),
    }


def main(argv: list[str]) -> int:
    """Read the spec, measure, write the result; the script's failures are in the result."""
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    result = measure(spec)
    with open(spec["result_path"], "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
