"""The verdict's line never calls a run clean while a risk worth fixing stands: a finding that
costs no time but is worth fixing (memory growing every step) is named after the time verdict,
and the line does not say "no bottleneck worth fixing"."""

from __future__ import annotations

from tests.conftest import corpus_file
from torchdoctor.analysis.bundle import analyze_table
from torchdoctor.report.assemble import verdict
from torchdoctor.rules.account_rules import account_verdict
from torchdoctor.rules.finding import Finding
from torchdoctor.trace.load import load_trace


def _finding(fid: str, severity: str, saving_ms: float) -> Finding:
    return Finding(fid, "t", severity, saving_ms, 0.0, {}, "# fix")


def test_a_risk_alone_is_named_and_the_run_is_not_called_clean() -> None:
    a = analyze_table(load_trace(corpus_file("cpu_only_rank34")))
    clean = verdict(a, [])
    assert clean.endswith("No bottleneck worth fixing found.")
    risky = verdict(a, [_finding("memory-growth", "warning", 0.0)])
    assert "No bottleneck worth fixing" not in risky
    assert "But fix: memory growing every step (a risk, not time)." in risky
    # an info finding is for the record: the bill stays clean
    assert verdict(a, [_finding("memory-growth", "info", 0.0)]) == clean


def test_an_unexplained_step_is_not_a_clean_bill_in_either_wording() -> None:
    account = {"explained": False, "efficiency": 0.05, "top_lines": [{}]}
    for line in (
        "3 steps. No bottleneck worth fixing found.",
        "3 steps. No time bottleneck found. But fix: memory growing every step (a risk, not time).",
    ):
        out = account_verdict(line, account)
        assert out.startswith(
            "3 steps. Not a clean bill: no named bottleneck, but the step runs at 5%"
        )
        assert "bottleneck found" not in out
    assert account_verdict("3 steps. No time bottleneck found.", {"explained": True}) == (
        "3 steps. No time bottleneck found."
    )
