"""A dominant operator whose FLOPs could not be counted is taken as the step's compute
(rules/assumed_compute.py), on hand-written records: the account says so in its evidence and
the unexplained-step finding stays quiet; an uncounted operator that does not dominate changes
nothing."""

from __future__ import annotations

from typing import Any

import pytest

from torchdoctor.rules.account_rules import step_account, unexplained


def record(
    ops: list[tuple[str, float]], uncounted: dict[str, int], seen: list[str] | None = None
) -> dict[str, Any]:
    """A 100 ms step: 90 ms inside torch operators (``ops`` shares them out), 5 ms of Python,
    and a counted roofline of 2 ms (the counted operators' work only)."""
    row = {
        "site": "t.py:5",
        "function": "main",
        "code": "y = model(x)",
        "self_ms": 95.0,
        "inclusive_ms": 95.0,
        "under": {"torch ops": 90.0, "Python": 5.0},
        "ops": [list(o) for o in ops],
    }
    return {
        "steps": {"mean_step_ms": 100.0, "median_step_ms": 100.0, "measured_steps": 5},
        "lines": {"rows": [row], "categories": {"torch ops": 90.0, "Python": 5.0}},
        "roofline": {
            "work": {"uncounted_compute_ops": uncounted, "ops_seen": seen or []},
            "efficiency": {"roofline_ms": 2.0, "share": 0.02, "step_ms": 100.0},
            "attainable": {"source": "measured"},
        },
    }


def test_a_dominant_uncounted_operator_is_explained_compute() -> None:
    # the overload the counting mode names (lstm.input) matches the line table's aten::lstm
    rec = record([("aten::lstm", 85.0), ("aten::add", 5.0)], {"aten::lstm.input": 2})
    a = step_account(rec, [])
    assert a is not None and a.assumed_compute is not None
    assumed = a.assumed_compute
    assert assumed["op"] == "aten::lstm.input" and assumed["calls"] == 2
    # 85 of the 90 ms of operators: 85 ms taken as compute, plus 2 ms / (1/3) for the rest;
    # the allowance is capped at the 90 ms inside operators, leaving the 5 ms of Python
    assert assumed["ms"] == pytest.approx(85.0) and assumed["share_of_ops"] == pytest.approx(0.9444)
    assert a.allowance_ms == pytest.approx(90.0) and a.unexplained_ms == pytest.approx(10.0)
    assert "could not be counted" in assumed["why"]
    assert unexplained(rec, []) is None


def test_an_uncounted_operator_that_does_not_dominate_changes_nothing() -> None:
    # the aten::mm inside the custom operator holds 40 of the 90 ms: under half
    seen = ["aten::add", "mylib::fused_mlp"]
    rec = record([("aten::mm", 40.0), ("aten::add", 50.0)], {"mylib::fused_mlp": 4}, seen)
    a = step_account(rec, [])
    assert a is not None and a.assumed_compute is None
    assert a.allowance_ms == pytest.approx(6.0)  # the counted roofline alone: 2 ms / (1/3)
    f = unexplained(rec, [])
    assert f is not None and f.saving_ms_per_step == pytest.approx(94.0)


def test_nothing_uncounted_nothing_assumed() -> None:
    rec = record([("aten::_transformer_encoder_layer_fwd", 90.0)], {})
    a = step_account(rec, [])
    assert a is not None and a.assumed_compute is None
    assert unexplained(rec, []) is not None  # 2 ms of counted work cannot explain 90 ms


def test_a_custom_operator_owns_the_profiled_operators_the_count_never_saw() -> None:
    # the profiler names the aten::matmul and aten::relu inside tdx::fused_mlp; the counting
    # mode saw the custom operator whole, and aten::sum beside it
    ops = [("aten::matmul", 70.0), ("aten::relu", 12.0), ("aten::sum", 8.0)]
    seen = ["aten::sum", "aten::randn", "tdx::fused_mlp"]
    rec = record(ops, {"tdx::fused_mlp": 1}, seen)
    a = step_account(rec, [])
    assert a is not None and a.assumed_compute is not None
    assert a.assumed_compute["op"] == "tdx::fused_mlp" and a.assumed_compute["calls"] == 1
    assert a.assumed_compute["ms"] == pytest.approx(82.0)  # 70 + 12 of the 90 ms
    assert unexplained(rec, []) is None
    # a record without ops_seen (an older run) cannot tell: nothing is assumed
    old = record(ops, {"tdx::fused_mlp": 1})
    del old["roofline"]["work"]["ops_seen"]
    b = step_account(old, [])
    assert b is not None and b.assumed_compute is None and unexplained(old, []) is not None
