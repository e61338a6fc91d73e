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


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def job_length(namespace: dict[str, Any]) -> dict[str, Any] | None:
    """``{"name", "value", "unit"}`` (unit ``steps`` or ``epochs``) of the first count the
    script's globals (or an argparse/config object among them) name; None when none does."""
    sources: list[tuple[str, Any]] = [("", namespace)]
    for c in _CONTAINERS:
        obj = namespace.get(c)
        if obj is not None and not isinstance(obj, int | float | str):
            sources.append(
                (
                    f"{c}.",
                    obj if isinstance(obj, dict) else vars(obj) if hasattr(obj, "__dict__") else {},
                )
            )
    for unit, names in (("steps", STEP_NAMES), ("epochs", EPOCH_NAMES)):
        for prefix, values in sources:
            if not isinstance(values, dict):
                continue
            for name in names:
                n = _int(values.get(name))
                if n is not None:
                    return {"name": prefix + name, "value": n, "unit": unit}
    return None
