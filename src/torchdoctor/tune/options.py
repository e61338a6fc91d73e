"""``tune``'s options, typed, with their defaults in one place: the command line takes its
defaults from here (``tune/cli.py``) and every part of a tuning run reads these fields."""

from __future__ import annotations

from dataclasses import dataclass

from torchdoctor.ab import MIN_GAIN


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
    nproc: int = 1
    seed: int = 0
    function: str | None = None
    db: str = "torchdoctor-runs/tune.sqlite"
    resume: bool = False
    json_path: str | None = None
    html_path: str | None = None
    out: str = "torchdoctor.toml"
