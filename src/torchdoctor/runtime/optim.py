"""Switching an optimizer to its foreach or fused implementation.

The implementation is a constructor flag, so switching means rebuilding the optimizer with the
same parameter groups. That is only safe while it is fresh: a rebuilt optimizer starts with empty
state, and anything holding the old object (an LR scheduler, hooks) keeps pointing at it.
"""

from __future__ import annotations

import inspect
from typing import Any

from torch.optim import Optimizer

_OTHER = {"fused": "foreach", "foreach": "fused"}


def apply_optimizer_impl(optimizer: Optimizer, impl: str) -> tuple[Optimizer, str | None]:
    """Return ``(optimizer, message)``: a rebuilt optimizer with ``impl=True``, or the original
    with a sentence saying why it was left alone (None when ``impl`` is "default")."""
    if impl == "default":
        return optimizer, None
    cls = type(optimizer)
    name = cls.__name__
    if optimizer.state:
        return optimizer, (
            f"optimizer_impl={impl!r} not applied: {name} already has state (it has stepped); "
            f"construct it with {impl}=True yourself"
        )
    try:
        accepted = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):  # pragma: no cover - C-implemented optimizers
        accepted = {}  # type: ignore[assignment]
    if impl not in accepted:
        return (
            optimizer,
            f"optimizer_impl={impl!r} not applied: {name} has no {impl} implementation",
        )
    other = _OTHER[impl]
    # Both flags cannot be on: torch rejects fused=True with foreach=True.
    flags: dict[str, Any] = {impl: True, other: None if other == "foreach" else False}
    groups = [
        {**group, **{k: v for k, v in flags.items() if k in group or k == impl}}
        for group in optimizer.param_groups
    ]
    defaults = {k: v for k, v in optimizer.defaults.items() if k in accepted}
    defaults.update({k: v for k, v in flags.items() if k in accepted})
    try:
        rebuilt = cls(groups, **defaults)
    except (RuntimeError, ValueError, TypeError) as exc:
        return optimizer, f"optimizer_impl={impl!r} not applied to {name}: {exc}"
    return rebuilt, f"{name} rebuilt with {impl}=True (same parameter groups)"
