"""A finding is data: what fired, how much it costs, the numbers behind it, and the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torchdoctor.rules.registry import finding_ids
from torchdoctor.rules.spec import SEVERITIES, Severity

__all__ = ["FINDING_IDS", "SEVERITIES", "Finding", "FindingId", "Severity", "rank_findings"]

FindingId = str
"""A stable finding id: one of ``FINDING_IDS``, registered in ``rules/registry.py``."""
FINDING_IDS: tuple[str, ...] = finding_ids()


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

    def __post_init__(self) -> None:
        if self.id not in FINDING_IDS:
            raise ValueError(f"unknown finding id {self.id!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")
        if not 0.0 <= self.share_of_step <= 1.0:
            raise ValueError(f"share_of_step must be within [0, 1]; got {self.share_of_step}")
        if self.saving_ms_per_step < 0:
            raise ValueError(f"saving_ms_per_step must be >= 0; got {self.saving_ms_per_step}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Most valuable first: by estimated saving, then severity, then id (deterministic)."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (-f.saving_ms_per_step, order[f.severity], f.id))
