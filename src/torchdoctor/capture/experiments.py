"""Measure what a mode costs by switching it for a few extra steps inside the run.

After the profiled window, when ``check`` is about to stop the script anyway (never with
``--full``, never under torchrun, where ranks must stop on the same step), each ``Toggle``
runs for a few more steps, interleaved with the user's own setting, one step each:
``changed, baseline, baseline, changed, changed, baseline, baseline, changed`` (four pairs) after
one discarded warm-up step in
the changed setting (the first step after a switch pays for it: a thread pool grows, caches
refill). The result is both medians and the per-pair ratios.

A toggle changes nothing the script can observe in its results, except where noted by its
rule (more threads reorder float sums; no grad for forwards whose outputs never reach a
backward). Everything is switched back before the script is stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from torchdoctor.capture import guest

PATTERN = (
    "changed",
    "baseline",
    "baseline",
    "changed",
    "changed",
    "baseline",
    "baseline",
    "changed",
)
WARM_STEPS = 1
BUDGET_S = 20.0
"""At most this long in extra steps, all toggles together; a toggle cut short keeps the pairs
it finished."""


@dataclass
class Toggle:
    """One mode switch: ``apply`` sets the changed setting, ``restore`` the user's."""

    id: str
    """The finding id whose cost it measures."""
    what: str
    """What the changed arm does, for the report ("anomaly detection off")."""
    apply: Callable[[], None]
    restore: Callable[[], None]
    cleanup: Callable[[], None] | None = None
    """Called once when the experiments end (hooks the toggle installed for both arms)."""
    baseline_ms: list[float] = field(default_factory=list)
    changed_ms: list[float] = field(default_factory=list)
    error: str | None = None

    def result(self) -> dict[str, Any]:
        """Both medians (ms), their ratio (changed / baseline) and the per-pair ratios."""
        pairs = [c / b for c, b in zip(self.changed_ms, self.baseline_ms, strict=False) if b > 0]
        base = median(self.baseline_ms) if self.baseline_ms else None
        changed = median(self.changed_ms) if self.changed_ms else None
        return {
            "id": self.id,
            "toggle": self.what,
            "baseline_ms": [round(x, 4) for x in self.baseline_ms],
            "changed_ms": [round(x, 4) for x in self.changed_ms],
            "baseline_median_ms": base,
            "changed_median_ms": changed,
            "ratio": (changed / base) if base and changed is not None else None,
            "pair_ratios": [round(r, 4) for r in pairs],
            "error": self.error,
        }


class Experiments:
    """Runs the toggles one after another, one step per tick."""

    def __init__(self, toggles: list[Toggle], budget_s: float = BUDGET_S) -> None:
        self.toggles = toggles
        self.budget_s = budget_s
        self._plan: list[tuple[int, str]] = []
        for i in range(len(toggles)):
            self._plan += [(i, "warm")] * WARM_STEPS + [(i, arm) for arm in PATTERN]
        self._pos = -1
        self._current: tuple[int, str] | None = None
        self._t0 = 0.0
        self.done = False

    def begin(self) -> bool:
        """Set up the first step; False when there is nothing to run."""
        if not self._plan:
            self.done = True
            return False
        self._t0 = time.perf_counter()
        return self._next()

    def tick(self, step_s: float) -> bool:
        """Record the step that just ended; set up the next one. False when finished."""
        if self._current is not None:
            i, arm = self._current
            t = self.toggles[i]
            if arm == "changed":
                t.changed_ms.append(step_s * 1e3)
            elif arm == "baseline":
                t.baseline_ms.append(step_s * 1e3)
        if time.perf_counter() - self._t0 > self.budget_s:
            self.abort()
            return False
        return self._next()

    def _next(self) -> bool:
        self._pos += 1
        previous = self._current
        if self._pos >= len(self._plan):
            self.abort()
            return False
        i, arm = self._plan[self._pos]
        toggle = self.toggles[i]
        if toggle.error is not None:  # a toggle that failed is skipped
            self._current = None
            return self._next()
        try:
            if previous is not None and previous[0] != i:
                self._switch(self.toggles[previous[0]], "baseline")
            self._switch(toggle, arm)
            self._current = (i, arm)
        except Exception as exc:
            toggle.error = f"{type(exc).__name__}: {exc}"
            guest.note(f"measuring {toggle.id}", exc)
            self._safe_restore(toggle)
            self._current = None
            return self._next()
        return True

    def _switch(self, toggle: Toggle, arm: str) -> None:
        if arm in ("changed", "warm"):
            toggle.apply()
        else:
            toggle.restore()

    def _safe_restore(self, toggle: Toggle) -> None:
        try:
            toggle.restore()
        except Exception as exc:
            guest.note(f"restoring after {toggle.id}", exc)

    def abort(self) -> None:
        """Switch everything back (idempotent)."""
        if self.done:
            return
        self.done = True
        if self._current is not None:
            self._safe_restore(self.toggles[self._current[0]])
        self._current = None
        for t in self.toggles:
            if t.cleanup is not None:
                try:
                    t.cleanup()
                except Exception as exc:
                    guest.note(f"cleaning up after {t.id}", exc)

    def results(self) -> list[dict[str, Any]]:
        """One result per toggle that ran at least one pair."""
        return [t.result() for t in self.toggles if t.baseline_ms or t.changed_ms or t.error]
