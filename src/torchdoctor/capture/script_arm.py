"""A user's script as one arm of an A/B in its fresh process (``ab.child``), for ``compare
--rerun`` and ``fix --prove``: the script under ``check``'s step clock, the profiler off, stopped
after ``warmup`` + ``steps`` steps (or run to its end: ``full``).

SPEC (``python -m torchdoctor.capture.script_arm SPEC.json``): ``script``, ``args``, ``warmup``,
``steps``, ``full``; fix adds ``sources`` (path -> the file holding this arm's text of it, served
under the real path, so ``__file__`` and tracebacks are the script's own), ``seed`` (every random
stream), ``loss_steps`` (the scalars passed to ``Tensor.backward``, read once at the end) and
``hard_exit`` (end once the result is written: leftover threads must not hold the process).
The result: ``step_ms`` (every step, warm-up included), ``timed`` (the measured steps as check
times its clean window: CUDA events on a GPU), ``time.monotonic()`` instants ``t_imported``
(before torch), ``t_begin``, ``t_measure`` and ``t_window_end`` (after a device sync: the steady
window), ``t_end`` (the parent's clock too, so start-up and exit count), and ``status``,
``code``, ``exception``, ``source``, ``compiles``, ``compile_s``, ``loaders``, ``losses``.
"""

from __future__ import annotations

import time

_T_IMPORTED = time.monotonic()  # before torch: the parent's clock and ours are the same

import builtins  # noqa: E402
import contextlib  # noqa: E402
import importlib.abc  # noqa: E402
import importlib.machinery  # noqa: E402
import importlib.util  # noqa: E402
import linecache  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from torchdoctor.capture.timed_window import StepEvents, script_cuda  # noqa: E402


def _sync_device() -> None:
    """Wait for queued CUDA work, when the script started CUDA (we never initialise it)."""
    with contextlib.suppress(Exception):  # a broken device must not break the host's timing
        cuda = script_cuda()
        if cuda is not None:
            cuda.synchronize()


class _Marks(StepEvents):
    """The clock's listener: no profiler; the two instants the steady window needs, and the
    measured steps timed as ``check`` times its clean window."""

    def __init__(self) -> None:
        super().__init__()
        self.t_measure: float | None = None
        self.t_window_end: float | None = None

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
        self.t_measure = time.monotonic() if on else None
        super().set_measuring(on)


class _Overlay(importlib.abc.MetaPathFinder):
    """Imports the user's own modules from this arm's text instead of the file on disk."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.sources = sources

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        origin = os.path.abspath(spec.origin) if spec is not None and spec.origin else None
        if origin is None or origin not in self.sources:
            return None
        return importlib.util.spec_from_loader(
            name, _Loader(origin, self.sources[origin]), origin=origin
        )


class _Loader(importlib.abc.Loader):
    def __init__(self, path: str, source: str) -> None:
        self.path, self.source = path, source

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__file__ = self.path
        exec(compile(self.source, self.path, "exec"), module.__dict__)


def _remember(path: str, source: str) -> None:
    # tracebacks, inspect and check's call reader see this arm's text (mtime None: kept)
    linecache.cache[path] = (len(source), None, source.splitlines(keepends=True), path)


def seed_everything(seed: int) -> None:
    """Python's, numpy's (when installed) and torch's random streams."""
    import torch

    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    torch.manual_seed(seed)


class LossRecorder:
    """Keeps the first ``limit`` scalar losses passed to ``Tensor.backward`` (on the device; read
    once, after the run)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept: list[Any] = []
        self._orig: Any = None

    def install(self) -> None:
        if self.limit <= 0:
            return
        import torch

        self._orig = orig = torch.Tensor.backward
        kept, limit = self.kept, self.limit

        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if len(kept) < limit and tensor.numel() == 1:
                kept.append(tensor.detach().float().clone())
            return orig(tensor, *args, **kwargs)

        torch.Tensor.backward = backward  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        if self._orig is not None:
            import torch

            torch.Tensor.backward = self._orig  # type: ignore[method-assign]
            self._orig = None

    def values(self) -> list[float]:
        return [float(t.reshape(()).item()) for t in self.kept]


def run_main(script: str, args: Sequence[str], source: str) -> Any:
    """``script`` as ``__main__`` from ``source``, as ``python script args`` would run it."""
    from torchdoctor.capture.runner import run_function

    saved_argv, saved_path, saved_main = sys.argv[:], sys.path[:], sys.modules.get("__main__")
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(script))
    module = types.ModuleType("__main__")
    module.__file__ = script
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    _remember(script, source)
    code = compile(source, script, "exec")
    try:
        return run_function(lambda: exec(code, module.__dict__))
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main


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
    """Run the spec's script under the step clock; returns the result (module docstring)."""
    from torchdoctor.capture import markers
    from torchdoctor.capture.clock import StepClock
    from torchdoctor.capture.hooks import StepHooks
    from torchdoctor.capture.options import CheckOptions
    from torchdoctor.capture.runner import run_script

    script = os.path.abspath(spec["script"])
    sources = {
        os.path.abspath(p): Path(f).read_text(encoding="utf-8")
        for p, f in (spec.get("sources") or {}).items()
    }
    for path, text in sources.items():
        _remember(path, text)
    warmup = int(spec["warmup"])
    if spec.get("seed") is not None:
        seed_everything(int(spec["seed"]))
    # No profiler in an arm: the measured steps are the clean ones (no window of their own).
    opts = CheckOptions(
        warmup_steps=warmup,
        profile_steps=int(spec["steps"]),
        clean_steps=0,
        full=bool(spec.get("full")),
    )
    marks = _Marks()
    clock = StepClock(opts, marks)
    marks.clock = clock
    hooks = StepHooks(clock)
    losses = LossRecorder(int(spec.get("loss_steps") or 0))
    finder = _Overlay({p: t for p, t in sources.items() if p != script})
    sys.meta_path.insert(0, finder)
    hooks.install()
    losses.install()
    markers.set_clock(clock)
    t_begin = time.monotonic()
    clock.begin()
    try:
        if script in sources:
            outcome = run_main(script, list(spec["args"]), sources[script])
        else:
            outcome = run_script(spec["script"], list(spec["args"]))
    finally:
        markers.set_clock(None)
        losses.uninstall()
        hooks.uninstall()
        sys.meta_path.remove(finder)
    _sync_device()
    t_end = time.monotonic()
    compiles, compile_s = _compile_s()
    return {
        "status": outcome.status,
        "code": outcome.code,
        "exception": outcome.to_dict()["exception"],
        "source": clock.source,
        "warmup": warmup,
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
        "losses": losses.values(),
    }


def main(argv: list[str]) -> int:
    """Read the spec, measure, write the result; the script's failures are in the result."""
    from torchdoctor.ab.child import read_spec, write_result

    spec = read_spec(argv)
    try:
        result = measure(spec)
    except BaseException as exc:  # our own failure: say so in the result, never a hang
        result = {"status": "arm-error", "exception": f"{type(exc).__name__}: {exc}"}
    write_result(spec, result)
    if spec.get("hard_exit"):
        sys.stdout.flush()
        os._exit(0)  # the result is written: end now, as check does after its window
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
