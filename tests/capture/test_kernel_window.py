"""The kernel window's summary of GPU activity, checked against the trace analysis of recorded
H200 traces (a different implementation of the same union) and on hand-made events."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.conftest import TRACES
from torchdoctor.capture.kernel_window import summarise


def test_overlapping_streams_count_once_and_copies_are_busy_time() -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 0.0, "dur": 600.0},
        {"ph": "X", "cat": "kernel", "name": "add", "ts": 500.0, "dur": 200.0},  # other stream
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 1000.0, "dur": 100.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 5000.0},  # not GPU
        {"ph": "i", "cat": "kernel", "name": "marker", "ts": 0.0},
    ]
    s = summarise(events, steps=2)
    # busy: 0-700 and 1000-1100 = 800 us over 2 steps; kernel time 800 us (memcpy not a kernel)
    assert s["gpu_busy_ms_per_step"] == pytest.approx(0.4)
    assert s["kernel_ms_per_step"] == pytest.approx(0.4)
    assert s["activities"] == 3 and s["span_ms"] == pytest.approx(1.1)
    assert [k["name"] for k in s["top_kernels"]] == ["gemm", "add"]


def test_no_gpu_activity_is_zero_not_an_error() -> None:
    s = summarise([{"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 5}], steps=0)
    assert s["gpu_busy_ms_per_step"] == 0.0 and s["activities"] == 0 and s["top_kernels"] == []


@pytest.mark.parametrize("name", ["nanogpt_gpt2_eager_check", "nanogpt_char_eager_check"])
def test_busy_time_agrees_with_the_trace_analysis(name: str) -> None:
    path = TRACES / "h200" / f"{name}.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared H200 traces)")
    from torchdoctor.analysis.bundle import analyze_table
    from torchdoctor.trace.load import load_trace

    analysis = analyze_table(load_trace(path))
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    # the whole trace as one "step": the analysis's busy time summed over its steps
    total = summarise(events, steps=1)["gpu_busy_ms_per_step"]
    expected = analysis.gpu_busy_share * analysis.mean_step_ms * analysis.n_steps
    assert total == pytest.approx(expected, rel=0.02)
