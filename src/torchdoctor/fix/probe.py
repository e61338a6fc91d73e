"""The child process of ``fix --prove``: run one arm (the original script, or it with some changes)
and time its steps with check's step clock, the profiler off.

``python -m torchdoctor.fix.probe SPEC.json`` runs the script as ``__main__`` with its own
arguments; the spec's ``sources`` give the text of each file for this arm (the main script
and any of its own modules a change touched), served under the file's real path, so
``__file__``, relative data paths and tracebacks are the script's own. Steps are found as
check finds them (``torchdoctor.step()``, optimizer steps, DataLoader batches); after
``warmup + steps`` steps the script is stopped. The loss of each of the first steps is kept
(the scalar passed to ``Tensor.backward``, read once at the end) for the fidelity gate. Every
random stream is seeded first, the same way in every arm.

The result (JSON, written atomically): ``status``, ``step_ms`` (every step), ``warmup``,
``losses``, ``exception``.
"""

from __future__ import annotations

import builtins
import importlib.abc
import importlib.machinery
import importlib.util
import json
import linecache
import os
import random
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any


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


def probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one arm; the result document (see the module docstring)."""
    from torchdoctor.capture import markers
    from torchdoctor.capture.clock import QuietListener, StepClock
    from torchdoctor.capture.hooks import StepHooks
    from torchdoctor.capture.options import CheckOptions
    from torchdoctor.capture.timed_window import StepEvents

    script = os.path.abspath(spec["script"])
    sources = {
        os.path.abspath(p): Path(t).read_text(encoding="utf-8") for p, t in spec["sources"].items()
    }
    for path, text in sources.items():
        _remember(path, text)
    main_source = sources.get(script) or Path(script).read_text(encoding="utf-8")
    warmup, steps = int(spec["warmup"]), int(spec["steps"])
    seed_everything(int(spec.get("seed", 0)))
    # No instrument runs in this child: every step it times is clean already.
    options = CheckOptions(warmup_steps=warmup, profile_steps=steps, clean_steps=0)

    class _Timed(StepEvents, QuietListener):
        """The measured steps timed as check's clean window (CUDA events on a GPU)."""

    timed = _Timed()
    clock = StepClock(options, timed)
    timed.clock = clock
    hooks = StepHooks(clock)
    losses = LossRecorder(int(spec.get("loss_steps", warmup + steps)))
    finder = _Overlay({p: t for p, t in sources.items() if p != script})
    sys.meta_path.insert(0, finder)
    hooks.install()
    losses.install()
    markers.set_clock(clock)
    try:
        clock.begin()
        outcome = run_main(script, spec.get("args") or [], main_source)
    finally:
        markers.set_clock(None)
        losses.uninstall()
        hooks.uninstall()
        sys.meta_path.remove(finder)
    return {
        "status": outcome.status,
        "code": outcome.code,
        "exception": outcome.to_dict()["exception"],
        "source": clock.source,
        "warmup": warmup,
        "step_ms": [s * 1e3 for s in clock.step_s],
        "timed": timed.to_dict(),
        "losses": losses.values(),
    }


def main(argv: Sequence[str]) -> int:
    spec_path = Path(argv[0])
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    out = Path(spec["out"])
    try:
        result = probe(spec)
    except BaseException as exc:  # our own failure: say so in the result, never a hang
        result = {"status": "probe-error", "exception": f"{type(exc).__name__}: {exc}"}
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result), encoding="utf-8")
    os.replace(tmp, out)
    sys.stdout.flush()
    # The script may leave non-daemon threads or worker pools: the result is written, so end
    # now, as check does after its window.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
