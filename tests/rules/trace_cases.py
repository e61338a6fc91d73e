"""Recorded corpus traces for the trace family tests, and the check every trace family passes:
its spec's threshold decides (moved just past the measured value, the same measurement no
longer fires; moved just short of it, it fires again)."""

from __future__ import annotations

from dataclasses import replace

from tests.conftest import corpus_report
from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.rules.families import FAMILY_RULES
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.registry import REGISTRY
from torchdoctor.rules.spec import TraceRule
from torchdoctor.rules.trace_rules import family_finding
from torchdoctor.threshold import Threshold

RULES = {r.spec.id: r for r in FAMILY_RULES}


def analysis(stem: str) -> TraceAnalysis:
    """The analysis of corpus trace ``stem``: that of its analyze report, made once per test run
    and read by the other corpus tests too (skips without the corpus)."""
    analysed: TraceAnalysis = corpus_report(stem).analysis
    return analysed


def with_threshold(rule: TraceRule, value: float) -> TraceRule:
    """``rule`` with its spec's threshold moved to ``value``."""
    spec = replace(rule.spec, threshold=Threshold(value, "moved by the test"))
    return TraceRule(spec, rule.measure, rule.below)


def fire(fid: str, stem: str) -> Finding | None:
    """The finding ``fid``'s family rule makes of corpus trace ``stem``, or None."""
    return family_finding(RULES[fid], analysis(stem))


def threshold_decides(fid: str, stem: str) -> Finding:
    """``fid`` fires on ``stem`` as registered, falls quiet with its threshold just past the
    measured value and fires again just short of it (no threshold: any occurrence fires).
    Returns the registered finding."""
    rule, a = RULES[fid], analysis(stem)
    assert REGISTRY[fid] is rule.spec
    f = family_finding(rule, a)
    assert f is not None and f.id == fid
    m = rule.measure(a)
    assert m is not None
    if rule.spec.threshold is None:
        assert m.value > 0
        return f
    quiet = m.value * 0.999 if rule.below else m.value * 1.001 + 1e-9
    assert family_finding(with_threshold(rule, quiet), a) is None
    loud = m.value * 1.001 + 1e-9 if rule.below else m.value * 0.999
    assert family_finding(with_threshold(rule, loud), a) is not None
    return f
