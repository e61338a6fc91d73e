"""Running the trace rules: every family rule (``rules/families/``) measures the trace, its
registry entry judges and words the finding, and the inference findings join them."""

from __future__ import annotations

import functools
from collections.abc import Callable

from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.rules.families import FAMILY_RULES
from torchdoctor.rules.finding import Finding, rank_findings
from torchdoctor.rules.spec import TraceRule
from torchdoctor.rules.trace_common import finding

Rule = Callable[[TraceAnalysis], "Finding | None"]


def family_finding(rule: TraceRule, a: TraceAnalysis) -> Finding | None:
    """A family rule's measurement, judged and worded by its registry entry: the spec's
    threshold fires it, its title, severity policy and fix builder make the finding."""
    m = rule.measure(a)
    if m is None or not rule.fires(m):
        return None
    m, s = m.complete(), rule.spec
    v = s.variant(m.variant)
    fix = (v.fix if v is not None and v.fix is not None else s.fix)(**m.fix)
    return finding(
        a,
        s.id,
        (v.title if v is not None else s.title).format(**m.title),
        m.saving_ms,
        m.severity(s.severity),
        m.evidence,
        fix=fix,
        explanation=v.explanation if v is not None else None,
        where=list(m.where),
    )


def _family_rules() -> tuple[Rule, ...]:
    return tuple(functools.partial(family_finding, r) for r in FAMILY_RULES)


def evaluate(a: TraceAnalysis, rules: tuple[Rule, ...] | None = None) -> list[Finding]:
    """Run the rules and rank what fired by estimated saving.

    A trace of CUDA-graph capture gets only the capture findings (its launches were recorded,
    not run); every other trace gets the inference findings too (``rules/inference_rules.py``).
    """
    rules = _family_rules() if rules is None else rules
    found = [f for f in (rule(a) for rule in rules) if f is not None]
    if a.graphs is None and a.serving is None:
        return rank_findings(found)  # no inference rule applies: not even imported
    from torchdoctor.rules import inference_rules

    if inference_rules.is_capture_trace(a):
        return rank_findings(inference_rules.capture_findings(a))
    return rank_findings(inference_rules.merge(a, found))
