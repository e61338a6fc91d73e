"""``torchdoctor.step()``: an explicit step marker for loops the automatic signals miss.

The marker is a no-op outside ``torchdoctor check``, so a script can keep it permanently.
"""

from __future__ import annotations

from typing import Protocol


class _Ticker(Protocol):
    def tick(self, source: str) -> None: ...


_clock: _Ticker | None = None


def step() -> None:
    """Mark the end of one step (training or inference iteration).

    Once called, explicit markers take precedence over optimizer steps and DataLoader batches.
    Costs one attribute lookup when no ``check`` is watching.
    """
    clock = _clock
    if clock is not None:
        clock.tick("marker")


def set_clock(clock: _Ticker | None) -> None:
    """Route markers to ``clock`` (``None`` detaches them)."""
    global _clock
    _clock = clock
