"""``tune``'s options, typed, with their defaults in one place: the command line takes its
defaults from here (``tune/cli.py``) and every part of a tuning run reads these fields."""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchdoctor.ab import MIN_GAIN
from torchdoctor.errors import UserError

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smh]?)")


def parse_duration(text: str) -> float:
    """Seconds in ``300``, ``90s``, ``5m``, ``1h`` or ``1h30m``; anything else is a UserError."""
    s = text.strip().lower()
    parts = list(_DURATION.finditer(s))
    joined = "".join(m.group(0) for m in parts)
    if not s or not parts or joined.replace(" ", "") != s.replace(" ", ""):
        raise UserError(
            f"bad duration {text!r}: use seconds (300) or a number with a unit (90s, 5m, 1h)"
        )
    if len(parts) > 1 and any(not m.group(2) for m in parts):
        raise UserError(f"bad duration {text!r}: give every part a unit (1h30m)")
    total = sum(float(m.group(1)) * _UNITS[m.group(2) or "s"] for m in parts)
    if total <= 0:
        raise UserError(f"bad duration {text!r}: must be more than 0 seconds")
    return total


@dataclass(frozen=True)
class TuneOptions:
    budget: str | None = None
    """Stop starting trials after this much time (``300``, ``90s``, ``5m``, ``1h``)."""
    max_trials: int | None = None
    knobs: str | None = None
    """Comma-separated knob names (None: all that apply)."""
    steps: int = 10
    """Optimizer steps per configuration per round (one timed window)."""
    max_rounds: int = 20
    warmup: int = 3
    fidelity_steps: int = 20
    min_gain: float = MIN_GAIN
    """Smallest relative speed-up that counts: a win needs its whole 95% interval above it."""
    trial_timeout: str = "5m"
    """A trial still running after this long is killed and recorded as a hang."""
    nproc: int = 1
    seed: int = 0
    function: str | None = None
    db: str = "torchdoctor-runs/tune.sqlite"
    resume: bool = False
    json_path: str | None = None
    html_path: str | None = None
    out: str = "torchdoctor.toml"

    @property
    def trial_timeout_s(self) -> float:
        """``trial_timeout`` in seconds."""
        return parse_duration(self.trial_timeout)
