"""Which knobs to try first: the analyser's findings on the baseline's trace.

The baseline trial profiles a few extra steps into a trace; ``torchdoctor.commands.analyze.trace.analyze_path``
turns it into findings, whose stable ids ``space.FINDING_KNOBS`` maps to knobs. When the analyser is
not installed (or cannot read the trace), the diagnosis falls back to the baseline's own split of
each step: waiting for the next batch more than ``DATA_WAIT_BOUND`` of the step is reported as
``data-loading-bound``; otherwise there is no finding and the search uses ``space.DEFAULT_ORDER``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchdoctor.tune.trial import TrialResult

DATA_WAIT_BOUND = 0.2
"""Share of the step spent waiting for data above which the data pipeline is the bottleneck."""


def _analyser() -> Callable[[str], Any]:
    from torchdoctor.commands.analyze.trace import analyze_path

    return analyze_path


def from_analyser(
    trace_path: str | None, analyser: Callable[[str], Any] | None
) -> list[str] | None:
    """Finding ids, most valuable first, or None when there is no trace or no analyser."""
    if not trace_path or analyser is None:
        return None
    try:
        report = analyser(trace_path)
        findings = list(report.findings)
    except Exception:  # a diagnosis is advice: if it fails, the search still runs
        return None
    from torchdoctor.rules.finding import rank_findings

    return [f.id for f in rank_findings(findings)]


def diagnose(result: TrialResult, analyser: Callable[[str], Any] | bool | None = True) -> list[str]:
    """Finding ids for the baseline ``result``: the analyser's, plus the data-wait measurement.

    ``analyser=True`` imports the real one; pass a callable (or None) to replace it in tests.
    """
    fn = _analyser() if analyser is True else analyser
    ids = from_analyser(result.trace_path, fn if callable(fn) else None) or []
    share = result.data_wait_share
    if share is not None and share > DATA_WAIT_BOUND and "data-loading-bound" not in ids:
        ids.insert(0, "data-loading-bound")
    return ids
