"""Reversible attribute patches: every hook ``check`` installs is undone when the run ends."""

from __future__ import annotations

import contextlib
from typing import Any

_MISSING = object()


class Patcher:
    """Replaces attributes and remembers the originals, restoring them in reverse order."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def patch(self, owner: Any, name: str, new: Any) -> Any:
        """Set ``owner.name = new``; returns the previous value (looked up through the MRO)."""
        previous = getattr(owner, name)
        own = owner.__dict__.get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        self._saved.append((owner, name, own))
        setattr(owner, name, new)
        return previous

    def restore(self) -> None:
        """Undo every patch (idempotent)."""
        while self._saved:
            owner, name, own = self._saved.pop()
            if own is _MISSING:
                with contextlib.suppress(AttributeError):
                    delattr(owner, name)
            else:
                setattr(owner, name, own)
