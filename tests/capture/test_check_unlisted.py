"""``check`` on scripts with mistakes no rule was first written against (examples/unlisted):
it names the mistake, or at worst reports the unexplained time with the planted line at the top
of the line table; a healthy control gets no actionable finding. A fast subset runs always;
the rest are slow (benchmarks/validate_unlisted.py runs them all as separate processes)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.capture.check_helpers import REPO, UNLISTED_OPTS, unlisted_check

sys.path.insert(0, str(REPO / "benchmarks"))
from unlisted_cases import CASES, Case

BY_NAME = {c.script: c for c in CASES}
FAST = {"anomaly_left_on.py", "eval_with_grad.py", "python_metric_loop.py"}


@pytest.fixture(autouse=True)
def global_modes_restored() -> Any:
    """The scripts run in this process and set global modes of their own (anomaly detection,
    determinism, oneDNN, threads): put them back for the tests that follow."""
    import torch

    threads, mkldnn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    yield
    torch.autograd.set_detect_anomaly(False)
    torch.use_deterministic_algorithms(False)
    torch.backends.mkldnn.enabled = mkldnn
    torch.set_num_threads(threads)


def actionable(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        f for f in report["findings"] if f["severity"] != "info" and f["saving_ms_per_step"] > 0
    ]


def planted_site(case: Case) -> str:
    lines = case.path.read_text().splitlines()
    return f"{case.path}:{next(i for i, ln in enumerate(lines, 1) if case.line in ln)}"


def run_case(shared_check: Callable[..., Any], case: Case) -> Any:
    """``check`` of one case in this process (``unlisted_check``): made once per test run, and
    read by the loop-line and fused-compute tests too where they check the same script."""
    return unlisted_check(shared_check, case.path)


def shared_case(shared_check: Callable[..., Any], case: Case) -> Any:
    """A case's run with one intra-op thread (``shared_check``'s), made once per test run (the
    naming test and the measured-cost test read the same anomaly_left_on run)."""
    sys.path.insert(0, str(case.path.parent))
    try:
        return shared_check(case.path, "--steps", "40", opts=UNLISTED_OPTS)
    finally:
        sys.path.remove(str(case.path.parent))


def check_named(r: Any, case: Case) -> None:
    assert r.code == 0, r.stderr
    found = actionable(r.report)
    named = [f for f in found if f["id"] in case.expect]
    rows = r.run["lines"]["rows"]
    top_row = max(rows, key=lambda row: row["self_ms"]) if rows else {}
    site = planted_site(case)
    # A mode whose cost check measured by switching it, and found too small to fix here (on a
    # 2-CPU machine determinism costs little), is named as info with its measurement: right too.
    named += [
        f
        for f in r.report["findings"]
        if f["id"] in case.expect
        and f["severity"] == "info"
        and isinstance((f["evidence"].get("measured") or {}).get("ratio"), float)
    ]
    helper = helper_lines(case)
    # or the leading actionable finding is placed at the planted line (an unexplained share of
    # the step "most time at <that line>", as one loaded run put the per-tensor EMA loop)
    placed = bool(found) and (found[0].get("where") or [""])[0].split(" in ")[0] == site
    assert named or placed or top_row.get("site") == site or top_row.get("site") in helper, r.stdout
    if named and named[0]["where"]:
        where = named[0]["where"]
        assert (
            site in where
            or any(w.startswith(site) for w in where)
            or any(w.split(" in ")[0] in helper for w in where)
        ), where


_SAMPLING_LIMIT = pytest.mark.xfail(
    reason="known limit (docs/check.md): the sampler no longer lowers the switch interval, so "
    "the tokenizer's Python stretch is sampled when torch.tensor(rows) returns; some runs name "
    "only the loop's lines",
    strict=False,
)


def helper_lines(case: Case) -> set[str]:
    """Every line of the helper function (not ``main``) the planted line sits in. The sampler
    never lowers the interpreter's switch interval, so a pure-Python stretch that ends in a
    long call holding the GIL (``torch.tensor`` of nested lists) is sampled when that call
    returns: at the call's line, in the same helper. Naming the helper is right."""
    import ast

    tree = ast.parse(case.path.read_text())
    line = int(planted_site(case).rsplit(":", 1)[1])
    # a with block's exit runs at its own line: closing the file flushes what the planted
    # line wrote (json.dump into a buffered file), so the with line is the mistake's site too
    around = {
        f"{case.path}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.With) and node.lineno < line <= (node.end_lineno or node.lineno)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.FunctionDef)
            and node.name != "main"
            and node.lineno <= line <= (node.end_lineno or node.lineno)
        ):
            end = node.end_lineno or node.lineno
            return around | {f"{case.path}:{n}" for n in range(node.lineno, end + 1)}
    return around


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(FAST))
def test_fast_cases_are_named(shared_check: Callable[..., Any], script: str) -> None:
    check_named(shared_case(shared_check, BY_NAME[script]), BY_NAME[script])


@pytest.mark.slow
@pytest.mark.parametrize(
    "script",
    [
        pytest.param(s, marks=_SAMPLING_LIMIT) if s == "tokenize_in_loop.py" else s
        for s in sorted(c.script for c in CASES if not c.control and c.script not in FAST and c.env)
    ],
)
def test_slow_cases_are_named(shared_check: Callable[..., Any], script: str) -> None:
    check_named(run_case(shared_check, BY_NAME[script]), BY_NAME[script])


@pytest.mark.slow
def test_anomaly_cost_is_measured_inside_the_run(shared_check: Callable[..., Any]) -> None:
    case = BY_NAME["anomaly_left_on.py"]
    r = shared_case(shared_check, case)  # the run test_fast_cases_are_named reads too
    f = next(f for f in r.report["findings"] if f["id"] == "anomaly-detection")
    e = f["evidence"]["measured"]
    assert len(e["baseline_ms"]) == 4 and len(e["changed_ms"]) == 4
    assert e["ratio"] < 0.9  # the same steps without anomaly detection, interleaved
    assert r.run["steps"]["experiment_steps"] >= 9
    assert planted_site(case) in f["where"]


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(c.script for c in CASES if c.control))
def test_controls_stay_quiet(shared_check: Callable[..., Any], script: str) -> None:
    r = run_case(shared_check, BY_NAME[script])
    assert r.code == 0, r.stderr
    assert actionable(r.report) == [], r.stdout
