"""Hand-written check run records for the run family tests, and running one family rule on
them the way ``check`` does (``rules/run_common.family_findings``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from torchdoctor.record.run import RunRecord
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.run_common import family_findings
from torchdoctor.rules.spec import RunRule
from torchdoctor.threshold import Threshold


def record(step_ms: float = 100.0, **sections: Any) -> dict[str, Any]:
    """A run of 10 steps, 5 measured, ``step_ms`` each, with ``sections`` of run.json."""
    return {
        "steps": {
            "mean_step_ms": step_ms,
            "median_step_ms": step_ms,
            "measured_steps": 5,
            "count": 10,
        },
        **sections,
    }


def row(site: str, code: str = "x", **under: float) -> dict[str, Any]:
    """A line table row whose self and inclusive time is the sum of ``under`` (ms per step)."""
    total = sum(under.values())
    return {
        "site": site,
        "function": "main",
        "code": code,
        "self_ms": total,
        "inclusive_ms": total,
        "under": under,
        "ops": [],
    }


def lines(rows: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """The line table section: ``rows`` and their categories' totals."""
    cats: dict[str, float] = {}
    for r in rows:
        for k, v in r["under"].items():
            cats[k] = cats.get(k, 0.0) + v
    return {"rows": rows, "categories": cats, **extra}


def experiment(fid: str, base: float, changed: float, pairs: list[float] | None = None) -> dict:
    """A toggle check ran for finding ``fid``: median step ``base`` ms with the mode as the
    script set it, ``changed`` ms switched; every interleaved pair at that ratio by default."""
    ratio = changed / base
    return {
        "id": fid,
        "toggle": "off",
        "baseline_median_ms": base,
        "changed_median_ms": changed,
        "ratio": ratio,
        "pair_ratios": [ratio] * 4 if pairs is None else pairs,
    }


def fire(rule: RunRule, rec: dict[str, Any]) -> Finding | None:
    """The first finding ``rule`` makes of ``rec``, or None."""
    found = family_findings(rule, RunRecord.from_dict(rec))
    return found[0] if found else None


def with_threshold(rule: RunRule, value: float) -> RunRule:
    """``rule`` with its spec's threshold moved to ``value``."""
    spec = replace(rule.spec, threshold=Threshold(value, "moved by the test"))
    return RunRule(spec, rule.measure, rule.below)
