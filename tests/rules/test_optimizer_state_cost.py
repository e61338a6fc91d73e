"""An optimizer rebuilt every step costs more than its constructor: its ``step()`` creates the
state again (Adam's moments, SGD's momentum buffers) every step. That cost lands in
``Optimizer.step``; the trace measures it there and the finding counts it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from torchdoctor.capture.trace_ops import summarise_trace
from torchdoctor.rules.run_rules import run_findings


def _ev(name: str, ts: float, dur: float, cat: str = "cpu_op") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _trace(tmp_path: Path, first_step_state: bool) -> Path:
    """Two profiler steps of 1000 us; in each, an ``Optimizer.step#Adam.step`` range holding
    two ``zeros_like`` of 40 us (when ``first_step_state``), a ``lerp_`` of 100 us; and a
    ``zeros_like`` of 50 us outside it (the model's own: never the optimizer's state)."""
    events = []
    for k in range(2):
        t0 = 1000.0 * k
        events.append(_ev(f"ProfilerStep#{k + 1}", t0, 1000.0, "user_annotation"))
        events.append(_ev("aten::zeros_like", t0 + 10, 50.0))
        events.append(_ev("Optimizer.step#Adam.step", t0 + 500, 400.0, "user_annotation"))
        if first_step_state:
            events.append(_ev("aten::zeros_like", t0 + 510, 40.0))
            events.append(_ev("aten::zero_", t0 + 520, 20.0))  # inside zeros_like
            events.append(_ev("aten::zeros_like", t0 + 560, 40.0))
        events.append(_ev("aten::lerp_", t0 + 700, 100.0))
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_the_trace_measures_the_state_created_inside_optimizer_step(tmp_path: Path) -> None:
    rebuilt = summarise_trace(_trace(tmp_path, first_step_state=True), 2)
    # two zeros_like of 40 us per step inside the optimizer's step: 0.08 ms (the nested zero_
    # is inside them; the model's zeros_like outside the range is not the optimizer's)
    assert rebuilt["optimizer_state_init_ms_per_step"] == pytest.approx(0.08)
    steady = summarise_trace(_trace(tmp_path, first_step_state=False), 2)
    assert steady["optimizer_state_init_ms_per_step"] == 0.0


def _record(state_ms: float | None, calls: int = 5) -> dict[str, Any]:
    ops = {} if state_ms is None else {"optimizer_state_init_ms_per_step": state_ms}
    return {
        "steps": {"mean_step_ms": 40.0, "median_step_ms": 40.0, "measured_steps": 5, "count": 10},
        "repeats": [
            {
                "kind": "optimizer",
                "site": "t.py:20",
                "what": "Adam",
                "calls": calls,
                "seconds": 0.01,
            }
        ],
        "ops": ops,
    }


def test_a_rebuilt_optimizer_costs_its_constructor_and_the_state_its_step_creates() -> None:
    (f,) = [f for f in run_findings(_record(30.0)) if f.id == "repeated-construction"]
    # the constructor: 10 ms over 5 steps = 2 ms; the state created in step(): 30 ms per step
    assert f.saving_ms_per_step == pytest.approx(32.0)
    assert f.evidence["construction_ms_per_step"] == pytest.approx(2.0)
    assert f.evidence["state_init_ms_per_step"] == pytest.approx(30.0)
    assert "Optimizer.step" in f.evidence["saving_from"]
    assert "re-creates the optimizer's state: 30.0 ms per step" in f.title
    # without the trace's number the constructor alone, as before
    (alone,) = [f for f in run_findings(_record(None)) if f.id == "repeated-construction"]
    assert alone.saving_ms_per_step == pytest.approx(2.0) and "state" not in alone.title


def test_an_optimizer_rebuilt_every_other_step_pays_the_state_every_other_step() -> None:
    (f,) = [f for f in run_findings(_record(30.0, calls=3)) if f.id == "repeated-construction"]
    # 3 constructions in 5 steps: 10 / 5 = 2 ms and 30 ms x 3/5 = 18 ms
    assert f.saving_ms_per_step == pytest.approx(20.0)


def _with_toggle(record: dict[str, Any], baseline_ms: float, changed_ms: float) -> dict[str, Any]:
    """``record`` with check's 'built once' toggle measured (``capture/toggles.py``)."""
    toggle = {
        "id": "repeated-construction",
        "toggle": "the optimizer at t.py:20 built once (its state kept)",
        "baseline_ms": [baseline_ms] * 4,
        "changed_ms": [changed_ms] * 4,
        "baseline_median_ms": baseline_ms,
        "changed_median_ms": changed_ms,
        "ratio": changed_ms / baseline_ms,
        "pair_ratios": [changed_ms / baseline_ms] * 4,
    }
    return {**record, "experiments": [toggle]}


def test_the_state_cost_measured_by_keeping_the_state_replaces_the_traces_lower_bound() -> None:
    # the trace saw 0.5 ms of state operators; steps with the state kept ran 25% faster
    record = _with_toggle(_record(0.5), baseline_ms=40.0, changed_ms=30.0)
    (f,) = [f for f in run_findings(record) if f.id == "repeated-construction"]
    # 25% of the 40 ms step: 10 ms, plus the constructor's 2 ms
    assert f.evidence["state_init_ms_per_step"] == pytest.approx(10.0)
    assert f.saving_ms_per_step == pytest.approx(12.0)
    assert f.evidence["trace_state_init_ms_per_step"] == pytest.approx(0.5)
    assert f.evidence["measured"]["changed_median_ms"] == 30.0
    assert "state kept" in f.evidence["saving_from"]
    assert "re-creates the optimizer's state: 10.0 ms per step" in f.title


def test_a_measurement_under_the_traces_floor_keeps_the_floor() -> None:
    # a busy machine's four pairs read no gain: the trace's state operators still cost 3 ms
    record = _with_toggle(_record(3.0), baseline_ms=40.0, changed_ms=40.4)
    (f,) = [f for f in run_findings(record) if f.id == "repeated-construction"]
    assert f.evidence["state_init_ms_per_step"] == pytest.approx(3.0)
    assert f.saving_ms_per_step == pytest.approx(5.0)
    assert "measured" in f.evidence
