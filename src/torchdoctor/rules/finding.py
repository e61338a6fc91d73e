"""A finding is data: what fired, how much it costs, the numbers behind it, and the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from torchdoctor.rules import registry
from torchdoctor.rules.spec import SEVERITIES, Severity

__all__ = [
    "COST_UNITS",
    "FINDING_IDS",
    "SEVERITIES",
    "CostUnit",
    "Finding",
    "FindingId",
    "Severity",
    "rank_findings",
]

FindingId = str
"""A stable finding id: one of ``FINDING_IDS``, registered in ``rules/registry.py``."""
FINDING_IDS: tuple[str, ...]
"""Every registered id, read from the registry on first use (it imports every family module;
a finding checks its own id without them, ``registry.registered``)."""


def __getattr__(name: str) -> tuple[str, ...]:
    if name == "FINDING_IDS":
        return registry.finding_ids()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


CostUnit = Literal["step", "job", "epoch"]
"""How often a finding's cost is paid: every step, once per job (a compile, a warm-up, a first
evaluation, workers starting) or once per epoch (workers restarting with each new iterator)."""
COST_UNITS: tuple[str, ...] = get_args(CostUnit)


@dataclass(frozen=True)
class Finding:
    """One diagnosed problem, ranked by ``saving_ms_per_step``."""

    id: FindingId
    """Stable identifier, registered in ``rules/registry.py``."""
    title: str
    """One line a user reads first, with the headline number."""
    severity: Severity
    """critical: costs a large share of the step; warning: worth fixing; info: for the record."""
    saving_ms_per_step: float
    """Estimated time saved per step by the fix, in milliseconds (never more than the step)."""
    share_of_step: float
    """The same saving as a fraction (0..1) of the mean step time."""
    evidence: dict[str, Any]
    """The measured numbers that fired the rule (units in the key names)."""
    fix: str
    """Code or a command the user can paste."""
    explanation: str = ""
    """Why this costs time, in a sentence or two."""
    doc_url: str = ""
    """Where the fix is documented."""
    where: list[str] = field(default_factory=list)
    """Source locations (file:line) or op names the finding points at, most costly first."""
    cost_unit: CostUnit = "step"
    """How often the cost is paid. For ``job`` and ``epoch`` the cost itself is
    ``one_off_ms``, and ``saving_ms_per_step`` is that cost spread over ``spread_steps`` steps
    (the job's, or an epoch's), so that it ranks against per-step costs by its share of the job;
    a report prints it in seconds of the job, never as a share of a step."""
    one_off_ms: float | None = None
    """The cost each time it is paid (ms): once per job or once per epoch."""
    spread_steps: int | None = None
    """The steps ``one_off_ms`` is spread over for ``saving_ms_per_step``."""
    spread_basis: str = ""
    """Where ``spread_steps`` comes from: the job length the script names, the run's own step
    count, an epoch's batches, or the assumed job of ``ONE_OFF_ASSUMED_JOB_STEPS``."""
    break_even_steps: float | None = None
    """The job length (steps) below which the cost is not repaid, where that is defined."""
    period_ms: float | None = None
    """For ``epoch``: an epoch's length (ms), its steps at the run's step time."""

    def __post_init__(self) -> None:
        if not registry.registered(self.id):
            raise ValueError(f"unknown finding id {self.id!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")
        if not 0.0 <= self.share_of_step <= 1.0:
            raise ValueError(f"share_of_step must be within [0, 1]; got {self.share_of_step}")
        if self.saving_ms_per_step < 0:
            raise ValueError(f"saving_ms_per_step must be >= 0; got {self.saving_ms_per_step}")
        if self.cost_unit not in COST_UNITS:
            raise ValueError(f"unknown cost unit {self.cost_unit!r}")
        if self.cost_unit != "step" and self.one_off_ms is None:
            raise ValueError(f"a cost paid once per {self.cost_unit} needs one_off_ms")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Most valuable first: by estimated saving, then severity, then id (deterministic). A
    one-off cost ranks by its ``saving_ms_per_step``, the cost spread over the job (or epoch):
    the same share of the job as a per-step cost of that size."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (-f.saving_ms_per_step, order[f.severity], f.id))
