"""How long the job would have run: the script's own step or epoch count, read from its
module globals (``max_iters = 20``, ``args.epochs``) when ``check`` stops it after the window.

A one-time cost (torch.compile's compile, a warm-up) is weighed against the job's length; a
stopped run does not show that length, but a training script almost always names it.
"""

from __future__ import annotations

from typing import Any

STEP_NAMES = (
    "max_iters",
    "max_steps",
    "num_steps",
    "n_steps",
    "total_steps",
    "train_steps",
    "num_iterations",
    "n_iters",
    "iterations",
    "max_iter",
    "steps",
)
EPOCH_NAMES = ("epochs", "num_epochs", "n_epochs", "max_epochs", "nepochs", "epoch")
_CONTAINERS = ("args", "opt", "opts", "config", "cfg", "hparams", "params", "conf")
_SECTIONS = ("trainer", "train", "training", "solver", "optim", "schedule")
"""Sections of a config object that hold the loop's length (minGPT's ``config.trainer``)."""


def _values(obj: Any) -> dict[str, Any]:
    """An argparse namespace's, a config object's or a dict's values ({} for anything else)."""
    if obj is None or isinstance(obj, int | float | str):
        return {}
    if isinstance(obj, dict):
        return obj
    return vars(obj) if hasattr(obj, "__dict__") else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def job_length(namespace: dict[str, Any]) -> dict[str, Any] | None:
    """``{"name", "value", "unit"}`` (unit ``steps`` or ``epochs``) of the first count the
    script's globals (or an argparse/config object among them, or a trainer section of one)
    name; None when none does."""
    sources: list[tuple[str, Any]] = [("", namespace)]
    for c in _CONTAINERS:
        obj = namespace.get(c)
        if obj is not None and not isinstance(obj, int | float | str):
            sources.append((f"{c}.", _values(obj)))
    for prefix, values in list(sources[1:]):  # one level down: config.trainer.max_iters
        for section in _SECTIONS:
            inner = _values(values.get(section))
            if inner:
                sources.append((f"{prefix}{section}.", inner))
    for unit, names in (("steps", STEP_NAMES), ("epochs", EPOCH_NAMES)):
        for prefix, values in sources:
            if not isinstance(values, dict):
                continue
            for name in names:
                n = _int(values.get(name))
                if n is not None:
                    return {"name": prefix + name, "value": n, "unit": unit}
    return None
