"""A user's script as one arm of an A/B in its fresh process (``ab.child``), for ``compare
--rerun`` and ``fix --prove``: the script under ``check``'s step clock, the profiler off, stopped
after ``warmup`` + ``steps`` steps (or run to its end: ``full``).

SPEC (``python -m torchdoctor.capture.script_arm SPEC.json``): ``script``, ``args``, ``warmup``,
``steps``, ``full``; fix adds ``sources`` (path -> the file holding this arm's text of it, served
under the real path, so ``__file__`` and tracebacks are the script's own), ``seed`` (every random
stream), ``loss_steps`` (the scalars passed to ``Tensor.backward``, read once at the end) and
``hard_exit`` (end once the result is written: leftover threads must not hold the process).
The result (:func:`measure`'s keys) comes back to the parent, with what ``ab.child`` saw, as
one :class:`ArmResult` (:func:`read`, the fields' meaning); :meth:`ArmResult.split` parts its
warm-up from its measured steps, or says why it has none, for compare and fix alike.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import os
import random
import sys
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchdoctor.capture.compile_watch import CompileWatch
from torchdoctor.capture.patches import Patcher
from torchdoctor.capture.timed_window import StepEvents, measured_step_ms, script_cuda
from torchdoctor.record.run import CompileStats

if TYPE_CHECKING:
    from torchdoctor.ab.child import ChildExit, Ending

ARGV = (sys.executable, "-m", "torchdoctor.capture.script_arm")
"""The command of an arm that runs this module (``ab.child.Arm.argv``)."""


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
        self.patcher = Patcher()

    def install(self) -> None:
        if self.limit <= 0:
            return
        import torch

        kept, limit = self.kept, self.limit

        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if len(kept) < limit and tensor.numel() == 1:
                kept.append(tensor.detach().float().clone())
            return orig(tensor, *args, **kwargs)

        orig = self.patcher.patch(torch.Tensor, "backward", backward)

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


def _loaders(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    keys = ("batch_size", "dataset_len", "num_workers", "persistent_workers")
    return [{k: getattr(d, k) for k in keys} for d in snapshot.get("dataloaders", [])]


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
    compiles = CompileWatch()  # not installed: only its count of the compiles from now on
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
        losses.patcher.restore()
        hooks.uninstall()
        sys.meta_path.remove(finder)
    _sync_device()
    t_end = time.monotonic()
    compiled = CompileStats()
    with contextlib.suppress(Exception):  # a failed count of compiles must not lose the steps
        compiled = compiles.snapshot(None)
    return {
        "status": outcome.status,
        "code": outcome.code,
        "exception": outcome.to_dict()["exception"],
        "source": clock.source,
        "warmup": warmup,
        "step_ms": [s * 1e3 for s in clock.step_s],
        "timed": marks.to_dict(),
        "t_begin": t_begin,
        "t_measure": marks.t_measure,
        "t_window_end": marks.t_window_end,
        "t_end": t_end,
        "compiles": compiled.compiles,
        "compile_s": compiled.compile_s,
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


# -- the parent's reading of the result --------------------------------------------------------
@dataclass(frozen=True)
class ArmSteps:
    """One process's steps (ms), parted at the end of its warm-up."""

    warmup_ms: tuple[float, ...]
    measured_ms: tuple[float, ...]
    """On the GPU's clock (CUDA events) when the child timed them so, as ``check`` times its
    clean window; else the host's step clock."""
    window_mean_ms: float | None
    """Their mean over the steady window, a device sync at both ends (a run the clock
    stopped); None otherwise."""


@dataclass(frozen=True)
class ArmResult:
    """One process of an arm as its parent reads it: the result document (module docstring)
    and what ``ab.child`` saw. Instants are ``time.monotonic()``'s, on both sides."""

    ended: Ending
    """``ab.child``'s: ``result`` unless the process left none (timeout, signal, no-result)."""
    status: str
    """How the script ended (``capture.runner.Outcome``: stopped, completed, exited, error...),
    ``arm-error`` (this module failed), or without a result ``timeout`` or ``crash``."""
    code: int
    """The script's exit status (-1 without a result)."""
    said: str
    """The script's exception in one line, else the end of its output; without a result, why
    (``ab.child``'s reason) and the end of its output."""
    t_spawn: float
    """Just before the process started."""
    wall_s: float
    """From the start to the process's end, as the parent saw it."""
    step_ms: tuple[float, ...] = ()
    """Every step, warm-up included, on the host's step clock."""
    warmup: int = 0
    gpu_step_ms: tuple[float, ...] = ()
    """The measured steps on the GPU's clock (CUDA events); empty on a CPU."""
    t_begin: float = 0.0
    """Just before the script ran (the step clock and its hooks in place)."""
    t_measure: float | None = None
    """The warm-up's end (after a device sync)."""
    t_window_end: float | None = None
    """The measured steps' end (after a device sync)."""
    t_end: float = 0.0
    """The script's end (after a device sync)."""
    losses: tuple[float, ...] = ()
    batch_size: int | None = None
    """The first DataLoader's batch size (samples per step), when one was seen."""
    compile_s: float = 0.0

    def split(self, steps: int) -> tuple[ArmSteps | None, str]:
        """The warm-up and at most ``steps`` measured steps (all of them in a run to its end),
        or None and why there are none, in one line."""
        ending = f"the script {self.status}, status {self.code}" + (
            f": {self.said}" if self.said else ""
        )
        if self.ended != "result":
            return None, self.said
        if self.status not in ("stopped", "completed"):
            return None, f"failed ({ending})"
        if len(self.step_ms) < self.warmup + 1:
            return None, (
                f"ran {len(self.step_ms)} steps, fewer than --warmup {self.warmup} + 1 (no "
                f"optimizer step, DataLoader batch or torchdoctor.step() marker seen?) ({ending})"
            )
        warm, measured = self.step_ms[: self.warmup], self.step_ms[self.warmup :]
        window = None
        if self.status == "stopped":
            measured = measured[:steps]
            if self.t_measure is not None and self.t_window_end is not None:
                window = (self.t_window_end - self.t_measure) * 1e3 / len(measured)
        if len(self.gpu_step_ms) == len(measured):
            measured = self.gpu_step_ms
        return ArmSteps(warm, measured, window), ""

    @property
    def startup_s(self) -> float:
        """Everything before the steady window that is not a warm-up step: the interpreter,
        imports and the script's own set-up. Taken from the instant the warm-up ended, not
        from the clock's first step: when an optimizer step takes over from DataLoader batches
        as the step signal, the clock's first step starts at the first batch, and what ran
        before it would be lost."""
        start = self.t_measure or self.t_begin
        return max(0.0, start - self.t_spawn - sum(self.step_ms[: self.warmup]) / 1e3)

    @property
    def exit_s(self) -> float:
        """From the script's end to the process's exit: a stopped run exits with what a
        finished one holds (modules, threads, objects)."""
        return max(0.0, self.t_spawn + self.wall_s - self.t_end)


def read(got: ChildExit) -> ArmResult:
    """One process of an arm, as ``ab.child.run_child`` returned it."""
    tail, doc = got.tail(), got.result
    if doc is None:
        status = "timeout" if got.ending == "timeout" else "crash"
        why = f"{got.why}: {tail}" if tail else got.why
        return ArmResult(got.ending, status, -1, why, got.t_spawn, got.wall_s)
    batch = next((d["batch_size"] for d in doc.get("loaders") or [] if d.get("batch_size")), None)
    return ArmResult(
        "result", str(doc.get("status")), int(doc.get("code") or 0),
        doc.get("exception") or tail, got.t_spawn, got.wall_s,
        tuple(float(x) for x in doc.get("step_ms") or []), int(doc.get("warmup") or 0),
        tuple(measured_step_ms(doc) or ()), float(doc.get("t_begin") or 0.0),
        doc.get("t_measure"), doc.get("t_window_end"), float(doc.get("t_end") or 0.0),
        tuple(float(x) for x in doc.get("losses") or []), batch,
        float(doc.get("compile_s") or 0.0),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
