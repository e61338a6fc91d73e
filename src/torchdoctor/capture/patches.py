"""Reversible attribute patches: every hook ``check`` installs is undone when the run ends."""

from __future__ import annotations

import contextlib
from typing import Any

_MISSING = object()


class Patcher:
    """Replaces attributes and remembers the originals, restoring them in reverse order."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []
        self._suspended: list[tuple[Any, str, Any]] = []

    def patch(self, owner: Any, name: str, new: Any) -> Any:
        """Set ``owner.name = new``; returns the previous value (looked up through the MRO)."""
        previous = getattr(owner, name)
        own = owner.__dict__.get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        self._saved.append((owner, name, own))
        setattr(owner, name, new)
        return previous

    def installed(self) -> list[Any]:
        """The values this patcher put in place (the wrappers), while they are in place."""
        if self._suspended:
            return [new for _, _, new in self._suspended]
        return [getattr(owner, name) for owner, name, _ in self._saved]

    def suspend(self) -> None:
        """Put the originals back for a while (until ``resume``); no-op when suspended."""
        if self._suspended:
            return
        for owner, name, own in reversed(self._saved):
            self._suspended.append((owner, name, getattr(owner, name)))
            _put_back(owner, name, own)

    def resume(self) -> None:
        """Reinstate the patches that ``suspend`` took away (idempotent)."""
        while self._suspended:
            owner, name, new = self._suspended.pop()
            setattr(owner, name, new)

    def restore(self) -> None:
        """Undo every patch (idempotent)."""
        self._suspended.clear()
        while self._saved:
            owner, name, own = self._saved.pop()
            _put_back(owner, name, own)


def _put_back(owner: Any, name: str, own: Any) -> None:
    if own is _MISSING:
        with contextlib.suppress(AttributeError):
            delattr(owner, name)
    else:
        setattr(owner, name, own)
