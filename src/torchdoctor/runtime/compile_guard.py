"""torch.compile with a recompile guard.

A recompile costs seconds and, after dynamo's recompile limit, the function silently runs eagerly
for good. The guard counts compiles per call of the compiled module, and on the first recompile
names the input dimension that changed and what to do about it. With ``max_recompiles`` set, one
more recompile than that raises instead.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from torchdoctor.errors import UserError
from torchdoctor.runtime.log import logger

# A call's input signature: (argument path, shape, dtype) for every tensor, plus scalars.
Signature = tuple[tuple[str, Any, Any], ...]


class RecompileError(UserError):
    """More recompiles than ``max_recompiles`` allows."""


@dataclass(frozen=True)
class Recompile:
    """One recompile seen while training."""

    index: int
    """1 for the first recompile after the initial compile."""
    changes: tuple[str, ...]
    """What changed in the inputs, e.g. "x dimension 0: 256 -> 128"."""
    reason: str | None
    """dynamo's own guard-failure text, where this torch version records it."""
    seconds: float
    """Wall time of the call that recompiled (compile plus one run), in seconds."""


def compile_count() -> int:
    """Graphs dynamo has compiled in this process (monotonic)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _last_recompile_reason() -> str | None:
    try:
        from torch._dynamo.utils import get_compilation_metrics

        metrics = get_compilation_metrics()
    except (ImportError, AttributeError):  # pragma: no cover - older torch
        return None
    return getattr(metrics[-1], "recompile_reason", None) if metrics else None


def recompile_limit() -> int:
    """dynamo's per-function recompile limit (renamed from cache_size_limit in torch 2.6)."""
    cfg = torch._dynamo.config
    return int(getattr(cfg, "recompile_limit", getattr(cfg, "cache_size_limit", 8)))


def ensure_recompile_limit(at_least: int) -> None:
    """Raise dynamo's limit so our error fires before its silent fallback to eager."""
    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    if getattr(cfg, name) < at_least:
        setattr(cfg, name, at_least)


def signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Signature:
    """Shapes and dtypes of the tensors (and values of plain scalars) among a call's inputs."""
    out: list[tuple[str, Any, Any]] = []

    def walk(path: str, obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            out.append((path, tuple(obj.shape), obj.dtype))
        elif isinstance(obj, int | float | bool):
            out.append((path, obj, type(obj)))
        elif isinstance(obj, list | tuple):
            for i, v in enumerate(obj):
                walk(f"{path}[{i}]", v)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(f"{path}[{k!r}]", v)

    for i, a in enumerate(args):
        walk(f"#{i}", a)
    for k, v in kwargs.items():
        walk(k, v)
    return tuple(out)


def describe_changes(old: Signature, new: Signature, names: list[str]) -> tuple[str, ...]:
    """Human-readable differences between two signatures; ``#i`` paths get parameter names."""

    def name(path: str) -> str:
        if path.startswith("#"):
            head, _, rest = path[1:].partition("[")
            idx = int(head)
            label = names[idx] if idx < len(names) else f"argument {idx}"
            return label + ("[" + rest if rest else "")
        return path

    before = {p: (s, d) for p, s, d in old}
    changes: list[str] = []
    for path, shape, dtype in new:
        if path not in before:
            changes.append(f"{name(path)}: new input")
            continue
        old_shape, old_dtype = before[path]
        if dtype != old_dtype:
            changes.append(f"{name(path)}: dtype {old_dtype} -> {dtype}")
        elif isinstance(shape, tuple) and isinstance(old_shape, tuple):
            if len(shape) != len(old_shape):
                changes.append(f"{name(path)}: rank {len(old_shape)} -> {len(shape)}")
            for dim, (a, b) in enumerate(zip(old_shape, shape, strict=False)):
                if a != b:
                    changes.append(f"{name(path)} dimension {dim}: {a} -> {b}")
        elif shape != old_shape:
            changes.append(f"{name(path)}: value {old_shape!r} -> {shape!r}")
    return tuple(changes)


def _param_names(module: nn.Module) -> list[str]:
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


class RecompileGuard:
    """Counts compiles of one compiled module and reports recompiles."""

    def __init__(
        self,
        module: nn.Module,
        *,
        max_recompiles: int | None,
        on_compile: Callable[[float], None] | None = None,
    ) -> None:
        self.calls_compiled = 0
        """Calls that triggered a compile (the first one is the initial compile)."""
        self.compile_time_s = 0.0
        """Wall time of those calls, in seconds (compile plus one run each)."""
        self.recompiles: list[Recompile] = []
        self.max_recompiles = max_recompiles
        self._names = _param_names(module)
        self._last: Signature | None = None
        self._on_compile = on_compile
        if max_recompiles is not None:
            ensure_recompile_limit(max_recompiles + 2)

    def __call__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Run ``fn(*args, **kwargs)``, noting whether it compiled."""
        before = compile_count()
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        sig = signature(args, kwargs)
        if compile_count() != before:
            self._compiled(sig, time.perf_counter() - start)
        self._last = sig
        return out

    def _compiled(self, sig: Signature, seconds: float) -> None:
        self.calls_compiled += 1
        self.compile_time_s += seconds
        if self._on_compile is not None:
            self._on_compile(seconds)
        if self.calls_compiled == 1 or self._last is None:
            logger.info("torch.compile: first compile took %.1f s", seconds)
            return
        changes = describe_changes(self._last, sig, self._names) or ("no input shape changed",)
        rec = Recompile(len(self.recompiles) + 1, changes, _last_recompile_reason(), seconds)
        self.recompiles.append(rec)
        if self.max_recompiles is not None and rec.index > self.max_recompiles:
            raise RecompileError(self._message(rec, fatal=True))
        if rec.index == 1:
            logger.warning(self._message(rec, fatal=False))
        elif rec.index + 1 >= recompile_limit():
            logger.warning(
                "torch.compile recompiled %d times; at %d it stops compiling this function and "
                "runs it eagerly",
                rec.index,
                recompile_limit(),
            )

    def _message(self, rec: Recompile, *, fatal: bool) -> str:
        what = "; ".join(rec.changes)
        head = (
            f"torch.compile recompiled {rec.index} times (max_recompiles={self.max_recompiles})"
            if fatal
            else f"torch.compile recompiled ({rec.seconds:.1f} s)"
        )
        why = f" [dynamo: {rec.reason.strip()}]" if rec.reason else ""
        return (
            f"{head} because {what}{why}. Mark that dimension dynamic "
            "(torch._dynamo.mark_dynamic(tensor, dim), or compile with dynamic=True), or pad / "
            "bucket inputs to a few fixed sizes (drop_last=True avoids a short last batch)."
        )
