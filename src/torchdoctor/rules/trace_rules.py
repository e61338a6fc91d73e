"""Running the trace rules: every family rule (``rules/families/``) measures the trace, and its
registry entry judges and words the finding."""

from __future__ import annotations

import functools
from collections.abc import Callable

from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.rules.families import FAMILY_RULES
from torchdoctor.rules.finding import Finding, rank_findings
from torchdoctor.rules.spec import TraceRule

Rule = Callable[[TraceAnalysis], "Finding | None"]


def family_finding(rule: TraceRule, a: TraceAnalysis) -> Finding | None:
    """A family rule's measurement, judged and worded by its registry entry: the spec's
    threshold fires it, its title, severity policy and fix builder make the finding, its saving
    clamped to the step (a fix cannot save more than all of it)."""
    m = rule.measure(a)
    if m is None or not rule.fires(m):
        return None
    m, s = m.complete(), rule.spec
    title, fix, explanation = s.wording(m)
    step = a.mean_step_ms
    saving = float(min(max(m.saving_ms, 0.0), step))
    share = saving / step if step > 0 else 0.0
    return Finding(
        s.id,
        title,
        s.severity.floored(m.severity(s.severity, share), share),
        round(saving, 3),
        round(share, 4),
        {"mean_step_ms": round(step, 3), **m.evidence},
        fix,
        explanation,
        s.doc_url,
        where=list(m.where),
    )


def _family_rules(capture: bool = False) -> tuple[Rule, ...]:
    return tuple(
        functools.partial(family_finding, r) for r in FAMILY_RULES if r.on_capture or not capture
    )


def evaluate(a: TraceAnalysis, rules: tuple[Rule, ...] | None = None) -> list[Finding]:
    """Run the rules and rank what fired by estimated saving.

    A trace of CUDA-graph capture gets only the rules measured on capture (its launches were
    recorded, not run); on any other trace a finding that fired drops the generic ones it
    refines (``FindingSpec.replaces``: an engine's findings over host-bound, sync stalls).
    """
    capture = a.graphs is not None and bool(a.graphs.is_capture_trace)
    rules = _family_rules(capture) if rules is None else rules
    found = [f for f in (rule(a) for rule in rules) if f is not None]
    dropped = {old for f in found for old in _REPLACES.get(f.id, ())}
    return rank_findings([f for f in found if f.id not in dropped])


_REPLACES = {r.spec.id: r.spec.replaces for r in FAMILY_RULES if r.spec.replaces}
