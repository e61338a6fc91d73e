"""Why the step time changed, when one named cause accounts for it, and whether a side's step
times can support a verdict at all (a side measured while other work held the CPU cores).

A cause *explains* the change when its time per step moved the same way as the mean step and by
at least :data:`EXPLAINS_MIN` of the mean step's difference (and by no more than
:data:`EXPLAINS_MAX` of it: a part that moved far more than the step, offset by the others, is
a reshuffle, not the reason). Both come from the same run's breakdown, so the words are
arithmetic on one trace; the interval on the step time stays what it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EXPLAINS_MIN = 0.5
"""A part that moved by half the step's difference or more (same direction) is named: a cause
that accounts for less leaves most of the change to the others."""
EXPLAINS_MAX = 2.0
"""...and by at most twice the difference: beyond that the other parts moved the other way by
more than the step did, and no single part is the reason."""
MIN_STEP_CHANGE = 0.02
"""A step-time difference under 2% of BASE's mean step has nothing to explain."""


@dataclass(frozen=True)
class Cause:
    """One part of the mean step that accounts for the step time's change."""

    key: str
    """The breakdown part (``idle:data_loading``...)."""
    name: str
    """The cause in words (``data loading``: ``breakdown_terms.name``)."""
    label: str
    """Its row in the breakdown table (``idle: data loading``: ``breakdown_terms.label``)."""
    base_ms: float
    new_ms: float
    step_delta_ms: float
    """The mean step's change (NEW - BASE) the part is weighed against."""

    @property
    def delta_ms(self) -> float:
        return self.new_ms - self.base_ms

    @property
    def share(self) -> float:
        """The part's change over the step's change (1: all of it)."""
        return self.delta_ms / self.step_delta_ms

    def text(self) -> str:
        moved = "fell" if self.delta_ms < 0 else "rose"
        return (
            f"explained by {self.name}: the breakdown's '{self.label}' {moved} from "
            f"{self.base_ms:.1f} to {self.new_ms:.1f} ms per step"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "part": self.key,
            "name": self.name,
            "label": self.label,
            "base_ms": self.base_ms,
            "new_ms": self.new_ms,
            "delta_ms": self.delta_ms,
            "share_of_step_change": self.share,
        }


def _words(key: str) -> tuple[str, str]:
    """(the cause, its row's label) in the words every command uses for the part."""
    from torchdoctor.analysis import breakdown_terms as terms

    return terms.name(key), terms.label(key)


def explaining_cause(base: Mapping[str, float], new: Mapping[str, float]) -> Cause | None:
    """The breakdown part that explains the mean step's change (see the module docstring), the
    one that moved most when several do; None when none does. ``base`` and ``new``: ms per step
    by part, whose sums are each side's mean step."""
    if not base or not new:
        return None
    step_delta = sum(new.values()) - sum(base.values())
    if abs(step_delta) < MIN_STEP_CHANGE * sum(base.values()):
        return None
    best: Cause | None = None
    for key in dict.fromkeys([*base, *new]):
        b, n = base.get(key, 0.0), new.get(key, 0.0)
        share = (n - b) / step_delta
        if EXPLAINS_MIN <= share <= EXPLAINS_MAX and (
            best is None or abs(n - b) > abs(best.delta_ms)
        ):
            best = Cause(key, *_words(key), b, n, step_delta)
    return best


@dataclass(frozen=True)
class Contention:
    """A side whose run recorded other work holding the CPU: its step times are inflated."""

    side: str
    """``BASE`` or ``NEW``."""
    path: str
    why: str

    def text(self) -> str:
        return f"{self.side} ({self.path}) ran under CPU contention: {self.why}"


def contention_of(findings: Mapping[str, Mapping[str, Any]], cpu: Any) -> str | None:
    """Why one run's step times are inflated by contention, or None: a ``cpu-oversubscribed``
    finding, or a ``cpu`` record where the main thread waited for a core long enough
    (``STARVED_SHARE``) or other processes left fewer free cores than the run's threads."""
    f = findings.get("cpu-oversubscribed")
    if f is not None:
        return f"finding cpu-oversubscribed: {f.get('title', '')}".rstrip(": ")
    from torchdoctor.rules.cpu_rules import contention

    return contention(cpu)


def contended(side: str, runs: Sequence[Any]) -> Contention | None:
    """The first run of one side that recorded contention (``Side.contention``), if any."""
    for r in runs:
        if r.contention:
            return Contention(side, r.path, r.contention)
    return None
