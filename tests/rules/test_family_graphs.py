"""The CUDA-graph family (``rules/families/graphs.py``): a capture trace is start-up, replays
whose kernels were not recorded are said, and device work left outside replayed graphs is
named; small synthetic traces (``tests/core/test_core_graphs.py``'s builders)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.core.test_core_graphs import _capture_trace, _replay, write
from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.rules.families import graphs
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.spec import TraceRule
from torchdoctor.rules.trace_rules import evaluate, family_finding
from torchdoctor.threshold import Threshold

CAPTURE, NOT_RECORDED, COVERAGE = graphs.RULES


def _analysis(tmp_path: Path, name: str, events: list) -> TraceAnalysis:
    return analyze_path(write(tmp_path / name, events)).analysis


def _fire(rule: TraceRule, a: TraceAnalysis) -> Finding | None:
    return family_finding(rule, a)


def test_a_capture_trace_gets_the_capture_and_only_the_rules_measured_on_capture(
    tmp_path: Path,
) -> None:
    a = _analysis(tmp_path, "cap.json", _capture_trace())
    f = _fire(CAPTURE, a)
    assert f is not None and f.severity == "info" and f.saving_ms_per_step == 0.0
    assert f.title.startswith("CUDA-graph capture: the trace records the capture of 3 graphs")
    assert f.evidence["graphs_captured"] == 3 and f.evidence["recorded_launches"] == 9
    assert [x.id for x in evaluate(a)] == ["graph-capture"]
    assert CAPTURE.on_capture and NOT_RECORDED.on_capture and not COVERAGE.on_capture


def test_replays_capture_nothing_and_record_their_kernels(tmp_path: Path) -> None:
    a = _analysis(tmp_path, "replay.json", _replay())
    assert _fire(CAPTURE, a) is None
    assert _fire(NOT_RECORDED, a) is None


def test_replays_without_their_kernels_are_a_warning_whatever_their_saving(
    tmp_path: Path,
) -> None:
    a = _analysis(tmp_path, "missing.json", _replay(graph_kernels=False))
    f = _fire(NOT_RECORDED, a)
    assert f is not None and f.severity == "warning" and f.saving_ms_per_step == 0.0
    assert f.title.startswith("Graph kernels not recorded: 3 graph launches in the trace, 3 ")
    assert _fire(COVERAGE, a) is None  # the graphs' share is unknown


def test_eager_work_beside_the_graphs_is_named_below_the_specs_coverage(tmp_path: Path) -> None:
    a = _analysis(tmp_path, "replay.json", _replay())
    f = _fire(COVERAGE, a)  # 1170 of 1335 µs of device time in graphs: 88% < 90%
    assert f is not None and f.title.startswith("Graph coverage 88%:")
    assert f.where == ["attention_kernel", "Memcpy HtoD"]
    moved = TraceRule(
        replace(COVERAGE.spec, threshold=Threshold(0.85, "moved by the test")),
        COVERAGE.measure,
        below=True,
    )
    assert _fire(moved, a) is None
    assert "host-bound" in COVERAGE.spec.replaces
