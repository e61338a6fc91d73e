"""``check``'s ``report.json`` read typed: what ``CheckResult.summary`` returns, so an API user
asks for ``result.summary.verdict``, ``result.summary.findings[0].saving_ms_per_step`` or
``result.summary.account.explained`` instead of digging in nested dicts.

``report.json`` stays the document (``CheckResult.report``, the raw dict, for existing
callers); this is a read of it, tolerant of a missing or malformed field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from torchdoctor.record.typed import Row, read, reads
from torchdoctor.record.values import as_dict, as_int, as_number, as_rows
from torchdoctor.rules.account_rules import StepAccount
from torchdoctor.rules.finding import Finding


def finding_from_dict(d: dict[str, Any]) -> Finding:
    """Rebuild a ``Finding`` from its ``to_dict`` form (as stored in run.json and report.json)."""
    names = {f.name for f in dataclasses.fields(Finding)}
    return Finding(**{k: v for k, v in d.items() if k in names})


def _findings(value: Any, _: Any) -> tuple[Finding, ...]:
    return tuple(finding_from_dict(f) for f in as_rows(value))


def account_from_dict(d: dict[str, Any]) -> StepAccount | None:
    """The step's account from ``report.json``'s ``account`` (None when absent or an error)."""
    if as_number(d.get("step_ms")) is None or "error" in d:
        return None
    return read(StepAccount, d)


@dataclass(frozen=True)
class StepsMeasured(Row):
    """How many steps the report rests on (``measurement``)."""

    requested_steps: int = 0
    measured_steps: int = 0
    seen_steps: int = 0
    complete: bool = False
    failure: str | None = None
    """``syntax-error``, ``import-error`` or ``crash`` when the script never ran its code."""
    note: str = ""


@dataclass(frozen=True)
class CheckReport(Row):
    """Rank 0's ``report.json``, typed."""

    verdict: str | None = None
    """The one-line verdict (``5 steps, 7.7 ms per step (CPU only). Fix first: ...``)."""
    findings: tuple[Finding, ...] = field(default=(), metadata=reads(_findings))
    """Trace and run-level findings merged, the largest saving first."""
    measurement: StepsMeasured = field(default_factory=StepsMeasured)
    account: StepAccount | None = field(
        default=None, metadata=reads(lambda v, _: account_from_dict(as_dict(v)))
    )
    """Where the step goes and whether its time is accounted for; None without one."""
    script: str | None = None
    world_size: int = field(default=1, metadata=reads(lambda v, dflt: max(as_int(v) or 1, 1)))
    ranks_reported: tuple[int, ...] = ()
    trace: str | None = None
    """The trace the report analysed (None when none was recorded)."""
    analysis_unavailable: str | None = None
    notes: tuple[str, ...] = ()
    schema_version: int = 0
