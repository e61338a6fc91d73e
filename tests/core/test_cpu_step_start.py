"""The input wait that opens a CPU-only step, on hand-built traces: work the previous step
carries over (the optimizer finishing after the step marker moved from its own hook) is not the
batch being produced, and one slow step start is not a pipeline that repeats every step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.core.synth import annotation, cpu_op, write_trace
from torchdoctor.analysis.bundle import analyze_table
from torchdoctor.rules.families import waits
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.trace_rules import family_finding
from torchdoctor.trace.load import load_trace

STEP = 1000.0
INPUT = next(r for r in waits.RULES if r.spec.id == "input-pipeline")


def input_pipeline(a: object) -> Finding | None:
    return family_finding(INPUT, a)  # type: ignore[arg-type]


def _steps(
    tmp_path: Path, opening_us: list[float], carried_us: float = 0.0, step_us: float = STEP
) -> Path:
    """Steps of ``step_us`` (1 ms); step k's first operator starts ``opening_us[k]`` after the
    marker, and an optimizer annotation begun 200 µs before each marker (after the first) runs
    ``carried_us`` into it."""
    ev = []
    for k, gap in enumerate(opening_us):
        lo = k * step_us
        ev.append(annotation(f"ProfilerStep#{k + 1}", lo, step_us))
        ev.append(cpu_op("aten::mm", lo + gap, step_us - gap - 300))
        if k and carried_us:
            ev.append(annotation("Optimizer.step#AdamW.step", lo - 200, 200 + carried_us))
    return write_trace(tmp_path / "t.json", ev)


def _input_ms(path: Path) -> list[float]:
    return [p.idle_ms["input_pipeline"] for p in analyze_table(load_trace(path)).per_step]


def test_the_opening_gap_is_measured_from_the_marker(tmp_path: Path) -> None:
    assert _input_ms(_steps(tmp_path, [150, 250, 350])) == pytest.approx([0.15, 0.25, 0.35])


def test_the_previous_steps_optimizer_running_on_is_not_input(tmp_path: Path) -> None:
    # The optimizer range ends 120 µs into steps 2 and 3; their operators start at 250 µs.
    got = _input_ms(_steps(tmp_path, [250, 250, 250], carried_us=120))
    assert got == pytest.approx([0.25, 0.13, 0.13])


def test_a_range_around_the_whole_loop_carries_nothing(tmp_path: Path) -> None:
    path = _steps(tmp_path, [250, 250, 250])
    doc = json.loads(path.read_text())
    doc["traceEvents"].append(annotation("train_loop", -50, 3 * STEP + 100))
    path.write_text(json.dumps(doc))
    assert _input_ms(path) == pytest.approx([0.25, 0.25, 0.25])


def test_an_operator_already_running_when_the_carry_ends_leaves_no_gap(tmp_path: Path) -> None:
    # Operators start 50 µs in, inside the optimizer range that ends 120 µs in.
    got = _input_ms(_steps(tmp_path, [50, 50, 50], carried_us=120))
    assert got == pytest.approx([0.05, 0.0, 0.0])


def test_one_slow_step_start_is_not_an_input_pipeline(tmp_path: Path) -> None:
    # Mean opening 1 ms of 5 ms (20%), but the median step opens in 10 µs.
    a = analyze_table(load_trace(_steps(tmp_path, [2980, 10, 10], step_us=5 * STEP)))
    assert a.per_step_ms(a.total.idle_ms["input_pipeline"]) == pytest.approx(1.0)
    assert input_pipeline(a) is None


def test_a_wait_in_every_step_is_still_named(tmp_path: Path) -> None:
    # steps of 5 ms opening 1 ms late: 20% of the step, and above the 0.5 ms a worker's
    # hand-over costs (DATA_WAIT_MIN_MS)
    a = analyze_table(load_trace(_steps(tmp_path, [1000, 900, 1100], step_us=5 * STEP)))
    f = input_pipeline(a)
    assert f is not None and f.id == "input-pipeline"
    assert f.evidence["median_step_share"] == pytest.approx(0.2)
    # what was measured, and no guess: no frames in this trace, so none named
    assert f.title.endswith("1.0 ms (20%) while the CPU runs no torch operator"), f.title
    assert f.saving_ms_per_step == pytest.approx(1.0)


def test_a_wait_under_a_workers_hand_over_is_not_named(tmp_path: Path) -> None:
    # the same 20% of 1 ms steps: 0.2 ms, the loop's own glue
    a = analyze_table(load_trace(_steps(tmp_path, [200, 180, 220])))
    assert input_pipeline(a) is None


def test_two_late_starts_in_four_steps_are_a_stall_not_a_pipeline(tmp_path: Path) -> None:
    # Two of four 5 ms steps open 3-3.5 ms late (a scheduler stall on a shared machine): the
    # mean (33%, 1.6 ms) and the median (30%) are lifted, the lower quartile is not.
    a = analyze_table(load_trace(_steps(tmp_path, [50, 3000, 50, 3500], step_us=5 * STEP)))
    assert a.per_step_ms(a.total.idle_ms["input_pipeline"]) > 0.5  # past the hand-over gate
    assert input_pipeline(a) is None


def test_three_waits_in_four_steps_are_a_pipeline(tmp_path: Path) -> None:
    a = analyze_table(load_trace(_steps(tmp_path, [1000, 900, 50, 1100], step_us=5 * STEP)))
    f = input_pipeline(a)
    assert f is not None and f.evidence["lower_quartile_step_share"] > 0.1


def test_the_frame_named_is_the_one_in_the_wait_not_the_carried_optimizer(tmp_path: Path) -> None:
    # On a busy machine the previous step's optimizer ran 2 ms into each 5 ms step; the loop
    # then waited 1 ms in its own ``fetch`` range before the first operator at 3 ms. Halfway
    # through that wait is ``fetch``; halfway from the marker would be the optimizer.
    path = _steps(tmp_path, [3000, 3000, 3000], carried_us=2000, step_us=5 * STEP)
    doc = json.loads(path.read_text())
    doc["traceEvents"] += [annotation("fetch", k * 5 * STEP + 2000, 1000) for k in range(3)]
    path.write_text(json.dumps(doc))
    f = input_pipeline(analyze_table(load_trace(path)))
    assert f is not None and f.evidence["cpu_frames_at_step_start"] == ["fetch"]
    assert f.title.endswith("while the CPU runs no torch operator (in fetch)"), f.title
