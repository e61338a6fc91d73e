"""The data shapes that pass between the search, the trial runner and the store."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from torchdoctor.tune.space import BASELINE, Assignment

Status = Literal["ok", "oom", "nonfinite", "compile-error", "crash", "timeout", "error"]
STATUSES: tuple[str, ...] = get_args(Status)

Phase = Literal["baseline", "single", "combine", "refine", "retry", "final"]


@dataclass(frozen=True)
class Trial:
    """One configuration to measure: the knob assignment, and why the search asked for it."""

    key: str
    """Canonical assignment (and repeat) string: the identity used to never run it twice."""
    phase: Phase
    """baseline, single (one knob changed), combine, refine, retry (after out-of-memory) or final
    (the baseline measured again to detect drift)."""
    assignment: Assignment
    """Knob name -> value (every knob, baseline values included)."""
    repeat: int = 0
    """0 for the first measurement of an assignment, 1 for the confirmation round."""
    reference: Assignment | None = None
    """The incumbent the candidate is compared with, round by round, in the same process (None:
    the baseline). The baseline always runs beside a candidate as well."""

    def arms(self) -> list[tuple[str, Assignment]]:
        """(label, assignment) of every arm the trial runs: candidate first, then the incumbent
        (when it is not the baseline), then the baseline (unless the candidate is the baseline)."""
        out: list[tuple[str, Assignment]] = [("candidate", self.assignment)]
        ref = self.reference
        if ref is not None and ref != self.assignment and ref != BASELINE:
            out.append(("incumbent", ref))
        if self.assignment != BASELINE:
            out.append(("baseline", dict(BASELINE)))
        return out


@dataclass
class TrialResult:
    """What a trial's process reported (or what the runner saw when it did not report)."""

    status: Status
    """ok, or why the trial failed: oom, nonfinite, compile-error, crash (signal), timeout, error."""
    reason: str = ""
    """One line: the exception, the signal or the timeout, with numbers."""
    step_times_s: list[float] = field(default_factory=list)
    """The candidate's mean optimizer-step time of each measured window (one per round), in
    seconds (warm-up excluded)."""
    rounds_s: dict[str, list[float]] = field(default_factory=dict)
    """Every arm's (candidate, incumbent, baseline) mean step time per round, in seconds; entry
    i of each list ran in the same round."""
    window_steps: int = 0
    """Optimizer steps per arm per round."""
    warmup_times_s: list[float] = field(default_factory=list)
    """Warm-up step times in seconds (the first holds compile time, if compiled)."""
    losses: list[float] = field(default_factory=list)
    """Loss of every optimizer step from step 0 (warm-up included), for the fidelity gate."""
    peak_bytes: int | None = None
    """Peak device memory (CUDA) or peak resident set size of the trial process (CPU), in bytes."""
    samples_per_step: int = 0
    """Samples in one optimizer step (the global batch)."""
    steps_per_epoch: int | None = None
    """Optimizer steps in one pass over the dataset (None for an iterable dataset)."""
    data_wait_share: float | None = None
    """Fraction (0..1) of steady-state step time spent waiting for the next batch."""
    probe: dict[str, Any] | None = None
    """What the device and workload support (see ``space.Probe``), when the trial got that far."""
    trace_path: str | None = None
    """A torch.profiler trace of a few extra steps (baseline only), for the diagnosis."""
    wall_s: float = 0.0
    """Wall-clock seconds of the whole trial, process start to exit."""
    resumed: bool = field(default=False, compare=False)
    """Loaded from the store rather than run in this session (not persisted)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON and the store (``resumed`` left out)."""
        d = asdict(self)
        d.pop("resumed")
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        """Rebuild from :meth:`to_dict` output; unknown keys are ignored (newer writers)."""
        known = set(cls.__dataclass_fields__) - {"resumed"}
        d = {k: v for k, v in data.items() if k in known}
        if d.get("status") not in STATUSES:
            d = {"status": "error", "reason": f"unreadable result: {data!r:.200}"}
        return cls(**d)
