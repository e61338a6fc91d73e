"""The plain types of an interleaved rerun (``compare --rerun``): its options, one side's
script, one fresh process's result. Apart from ``compare/rerun.py`` so that the process runner
(``compare/rerun_process.py``) and the rounds import them without importing each other."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

from torchdoctor import ab
from torchdoctor.compare.cost import RunCost

SideName = Literal["BASE", "NEW"]
RoundOrder = Literal["BASE NEW", "NEW BASE"]
"""Which side ran first in a round."""
RunStatus = Literal["stopped", "completed", "exited", "error", "interrupted", "timeout", "crash"]
"""How one process ended: stopped by the clock after its measured steps, completed (the script
ended by itself), exited (a non-zero ``sys.exit``), error (an exception), interrupted, timeout
(killed after ``timeout_s``), crash (no result: killed by a signal, or died in the interpreter)."""
StopReason = Literal["decided", "rounds", "time", "failed"]
"""Why the rounds stopped: the interval decided, ``rounds`` ran, ``max_s`` passed, a side failed."""


@dataclass(frozen=True)
class RerunOptions:
    """How an interleaved rerun measures (``compare --rerun``'s flags)."""

    rounds: int = 8
    """The most rounds (each: one fresh process of each side)."""
    warmup: int = 5
    """Steps per process before the steady window; their excess over steady steps, with the
    process's start-up and exit, is the one-time cost."""
    steps: int = 20
    """Steady-state steps per process after the warm-up (ignored with ``full``)."""
    full: bool = False
    """Let each process run to the script's end: every step after the warm-up counts, and the
    job's length is the runs' own."""
    job_steps: int | None = None
    """The job's length for the time-to-N cost (None: unknown, unless ``full``)."""
    min_rounds: int = ab.FEWEST_ROUNDS
    """Stop as soon as the headline interval decides once this many rounds are in (more than
    ``rounds``: never stop early, as a noise measurement wants)."""
    seed: int = 0
    """Seed of the order's draw (the same seed, the same orders)."""
    timeout_s: float = 900.0
    """The most seconds one process may run before its process group is killed."""
    max_s: float | None = None
    """Start no new round after this many seconds (None: no limit)."""

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.steps < 1 or self.min_rounds < 1:
            raise ValueError("rounds, steps and min_rounds must be >= 1")
        if self.warmup < 0:
            raise ValueError("warmup must be >= 0")
        if self.job_steps is not None and self.job_steps < 1:
            raise ValueError("job_steps must be >= 1 (or None)")
        if self.timeout_s <= 0 or (self.max_s is not None and self.max_s <= 0):
            raise ValueError("timeout_s and max_s must be > 0")


@dataclass(frozen=True)
class Script:
    """One side: a Python script and its arguments."""

    path: str
    args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not os.path.isfile(self.path):
            from torchdoctor.errors import UserError

            raise UserError(f"{self.path}: no such script")


@dataclass(frozen=True)
class ChildRun:
    """One fresh process of one side."""

    side: SideName
    round: int
    """0-based round number."""
    status: RunStatus
    code: int
    """The script's exit status (-1 when the process died without a result)."""
    reason: str
    """Why it failed, in one line (empty when it did not)."""
    wall_s: float
    """From the process's start to its end, as the parent saw it."""
    cost: RunCost | None
    """What it measured (None when it failed before its measured steps ended)."""
    detail: dict[str, Any] = field(default_factory=dict)
    """The child's raw record (step source, compiles, loaders...)."""

    @property
    def ok(self) -> bool:
        """It measured what was asked."""
        return self.cost is not None
