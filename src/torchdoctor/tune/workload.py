"""The workload file: one decorated function that builds a training step from a configuration.

A workload file is a plain Python file with one function decorated with ``@torchdoctor.workload``.
The function takes the :class:`~torchdoctor.config.RuntimeConfig` of the trial (most workloads ignore
it: the tuner applies the configuration) and returns a :class:`Workload` (or a dict with the same
keys)::

    import torch, torchdoctor as td
    from torchdoctor.tune import Workload

    @td.workload
    def build(config):
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        data = torch.utils.data.TensorDataset(torch.randn(4096, 64), torch.randn(4096, 1))
        return Workload(
            model=model,
            optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
            dataset=data,
            loss=lambda model, batch: torch.nn.functional.mse_loss(model(batch[0]), batch[1]),
            batch_size=64,
        )

This module does not import torch: loading the file happens in the trial's child process.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from torchdoctor.errors import UserError

F = TypeVar("F", bound=Callable[..., Any])

_MARK = "__torchdoctor_workload__"


@dataclass
class Workload:
    """What one training step needs. The tuner owns the loop, the device and the settings."""

    model: Any
    """The ``torch.nn.Module`` to train, built on the CPU (the tuner moves it)."""
    optimizer: Any
    """A ``torch.optim.Optimizer`` over ``model.parameters()``; the tuner rebuilds it with the same
    hyper-parameters when it tries the foreach or fused implementation."""
    dataset: Any
    """A ``torch.utils.data.Dataset``; read in a fixed order so every trial sees the same batches."""
    loss: Callable[[Any, Any], Any]
    """``loss(model, batch) -> scalar tensor``: the forward pass and the loss (the step function)."""
    batch_size: int
    """Samples per optimizer step (the global batch: kept when the tuner accumulates gradients)."""
    collate_fn: Callable[[list[Any]], Any] | None = None
    """Optional ``DataLoader`` collate function."""

    def __post_init__(self) -> None:
        if not callable(self.loss):
            raise UserError("workload: loss must be a function loss(model, batch) -> tensor")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise UserError(f"workload: batch_size must be an integer; got {self.batch_size!r}")
        if self.batch_size <= 0:
            raise UserError(f"workload: batch_size must be > 0; got {self.batch_size}")

    @classmethod
    def coerce(cls, value: Any) -> Workload:
        """Accept a :class:`Workload` or a dict with its keys; anything else is a UserError."""
        if isinstance(value, Workload):
            return value
        if isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise UserError(f"workload: unknown key {unknown[0]!r} (expected {sorted(known)})")
            try:
                return cls(**value)
            except TypeError as exc:
                raise UserError(f"workload: {exc}") from None
        raise UserError(
            f"workload function must return torchdoctor.tune.Workload or a dict; got {type(value).__name__}"
        )


def workload(func: F) -> F:
    """Mark ``func(config) -> Workload`` as the workload of its file (returns ``func`` unchanged)."""
    if not callable(func):
        raise TypeError("@torchdoctor.workload decorates a function")
    setattr(func, _MARK, True)
    return func


def load_module(path: str | Path) -> Any:
    """Import a workload file as a fresh module; a missing or broken file is a UserError."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: no such workload file")
    # Importable by its own name from its folder: DataLoader workers started with spawn or
    # forkserver unpickle the dataset by importing the module that defines its class.
    name = p.stem if p.stem.isidentifier() and p.stem not in sys.modules else f"_workload_{p.stem}"
    folder = str(p.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise UserError(f"{p}: cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling (DataLoader workers) look modules up
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise UserError(f"{p}:{exc.lineno}: syntax error: {exc.msg}") from None
    return module


def find_function(module: Any, path: str | Path, name: str | None = None) -> Callable[..., Any]:
    """The decorated function of a loaded workload module (or the one called ``name``)."""
    if name is not None:
        func = getattr(module, name, None)
        if not callable(func):
            raise UserError(f"{path}: no function named {name!r}")
        return func
    marked = [v for v in vars(module).values() if callable(v) and getattr(v, _MARK, False)]
    if not marked:
        raise UserError(f"{path}: no function decorated with @torchdoctor.workload")
    if len(marked) > 1:
        names = ", ".join(sorted(getattr(f, "__name__", "?") for f in marked))
        raise UserError(f"{path}: several @torchdoctor.workload functions ({names}); pick one")
    return marked[0]


def _is_workload_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr == "workload"
    return isinstance(target, ast.Name) and target.id == "workload"


def check_file(path: str | Path, name: str | None = None) -> None:
    """Fail early, in the parent, on a missing file or a file without a workload function.

    Parses the source instead of importing it, so the parent process never imports torch.
    """
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: no such workload file")
    try:
        tree = ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{p}: cannot read: {exc}") from None
    except SyntaxError as exc:
        raise UserError(f"{p}:{exc.lineno}: syntax error: {exc.msg}") from None
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if name is not None:
        if not any(f.name == name for f in funcs):
            raise UserError(f"{p}: no function named {name!r}")
        return
    if not any(_is_workload_decorator(d) for f in funcs for d in f.decorator_list):
        raise UserError(f"{p}: no function decorated with @torchdoctor.workload")
