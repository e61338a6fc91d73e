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

from torchdoctor.record.values import as_dict, as_number
from torchdoctor.rules.account_rules import StepAccount, TopLine
from torchdoctor.rules.finding import Finding

_d, _num = as_dict, as_number


def finding_from_dict(d: dict[str, Any]) -> Finding:
    """Rebuild a ``Finding`` from its ``to_dict`` form (as stored in run.json and report.json)."""
    names = {f.name for f in dataclasses.fields(Finding)}
    return Finding(**{k: v for k, v in d.items() if k in names})


def account_from_dict(d: dict[str, Any]) -> StepAccount | None:
    """The step's account from ``report.json``'s ``account`` (None when absent or an error)."""
    step = _num(d.get("step_ms"))
    if step is None or "error" in d:
        return None
    return StepAccount(
        step_ms=step,
        roofline_ms=_num(d.get("roofline_ms")),
        efficiency=_num(d.get("efficiency")),
        flops_share=_num(d.get("flops_share")),
        bytes_share=_num(d.get("bytes_share")),
        attainable=str(d.get("attainable") or ""),
        allowance_ms=_num(d.get("allowance_ms")) or 0.0,
        named_ms=_num(d.get("named_ms")) or 0.0,
        contention_ms=_num(d.get("contention_ms")) or 0.0,
        unexplained_ms=_num(d.get("unexplained_ms")) or 0.0,
        explained=bool(d.get("explained")),
        categories={str(k): _num(v) or 0.0 for k, v in _d(d.get("categories")).items()},
        top_lines=[TopLine.from_dict(r) for r in d.get("top_lines") or [] if isinstance(r, dict)],
        floor=str(d.get("floor") or "eager traffic floor"),
        eager_traffic_ms=_num(d.get("eager_traffic_ms")),
        fusion_gain_ms=_num(d.get("fusion_gain_ms")),
        mfu=_num(d.get("mfu")),
    )


@dataclass(frozen=True)
class StepsMeasured:
    """How many steps the report rests on (``measurement``)."""

    requested_steps: int = 0
    measured_steps: int = 0
    seen_steps: int = 0
    complete: bool = False
    failure: str | None = None
    """``syntax-error``, ``import-error`` or ``crash`` when the script never ran its code."""
    note: str = ""


@dataclass(frozen=True)
class CheckReport:
    """Rank 0's ``report.json``, typed."""

    verdict: str | None = None
    """The one-line verdict (``5 steps, 7.7 ms per step (CPU only). Fix first: ...``)."""
    findings: tuple[Finding, ...] = ()
    """Trace and run-level findings merged, the largest saving first."""
    measurement: StepsMeasured = field(default_factory=StepsMeasured)
    account: StepAccount | None = None
    """Where the step goes and whether its time is accounted for; None without one."""
    script: str | None = None
    world_size: int = 1
    ranks_reported: tuple[int, ...] = ()
    trace: str | None = None
    """The trace the report analysed (None when none was recorded)."""
    analysis_unavailable: str | None = None
    notes: tuple[str, ...] = ()
    schema_version: int = 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckReport:
        m = _d(d.get("measurement"))
        account = d.get("account")
        version, world = d.get("schema_version"), d.get("world_size")
        return cls(
            verdict=str(d["verdict"]) if d.get("verdict") else None,
            findings=tuple(
                finding_from_dict(f) for f in d.get("findings") or [] if isinstance(f, dict)
            ),
            measurement=StepsMeasured(
                requested_steps=int(_num(m.get("requested_steps")) or 0),
                measured_steps=int(_num(m.get("measured_steps")) or 0),
                seen_steps=int(_num(m.get("seen_steps")) or 0),
                complete=bool(m.get("complete")),
                failure=str(m["failure"]) if m.get("failure") else None,
                note=str(m.get("note") or ""),
            ),
            account=account_from_dict(account) if isinstance(account, dict) else None,
            script=str(d["script"]) if d.get("script") else None,
            world_size=world if isinstance(world, int) and world > 0 else 1,
            ranks_reported=tuple(r for r in d.get("ranks_reported") or [] if isinstance(r, int)),
            trace=str(d["trace"]) if d.get("trace") else None,
            analysis_unavailable=(
                str(d["analysis_unavailable"]) if d.get("analysis_unavailable") else None
            ),
            notes=tuple(str(n) for n in d.get("notes") or []),
            schema_version=version if isinstance(version, int) else 0,
        )
