"""Launch analysis: a hand-built timeline with known answers, and facts of the corpus."""

from __future__ import annotations

import json
import statistics
from typing import Any

import pytest

from tests.analysis.rawjson import GPU_CATS, KERNEL_CATS, LAUNCH_CATS, corr, events
from tests.analysis.synth import EVERYTHING, kernel, launch, make_table, steps_of
from torchdoctor.analysis.launch import analyze_launch
from torchdoctor.trace.steps import find_steps


def _timeline() -> Any:
    """Two steps, two streams, one kernel without a launch, one CUDA graph of three kernels."""
    return make_table(
        [
            launch(0, 5, corr=1),
            kernel("A", 10, 10, corr=1),  # stream idle (first work): host-late
            launch(6, 5, corr=2),
            kernel("B", 20, 2, corr=2),  # stream busy with A until 20: queued 14 us
            launch(25, 5, corr=5),
            kernel("E", 30, 5, corr=5, stream=8),  # other stream, first work: host-late
            launch(40, 5, corr=3),
            kernel("C", 45, 1, corr=3),  # stream idle since 22: host-late
            kernel("D", 50, 1, corr=99),  # its launch is not in the trace
            launch(70, 3, corr=7, name="cudaGraphLaunch"),
            kernel("G1", 72, 2, corr=7),  # stream idle since 51: host-late
            kernel("G2", 74, 2, corr=7),  # queued 4 us
            kernel("G3", 76, 2, corr=7),  # queued 6 us
        ]
    )


def test_hand_built_timeline() -> None:
    s = analyze_launch(_timeline(), steps_of((0, 60), (60, 100)))
    assert (s.kernel_count, s.kernels_each_step, s.kernels_per_step) == (8, (5, 3), 4.0)
    assert s.median_kernel_us == 2.0
    assert (s.launched_kernel_count, s.unlaunched_kernel_count) == (7, 1)
    # launched on their own: A, B, E, C; B (2 us) and C (1 us) are shorter than their 5 us call
    assert s.share_shorter_than_launch == 0.5
    assert s.median_launch_cost_us == 5.0
    assert s.median_launch_delay_us == 7.5  # delays 10, 14, 5, 5
    assert (s.queued_count, s.host_late_count) == (3, 4)
    assert s.queueing_delay_ms == pytest.approx(0.024)
    # GPU starved: [0,10] [22,30] [35,45] in step 1 (E's stream-8 work counts as busy), [60,72]
    assert s.host_late_idle_ms_each_step == pytest.approx((0.028, 0.012))
    assert s.host_late_idle_ms == pytest.approx(0.040)
    assert s.host_late_idle_ms_per_step == pytest.approx(0.020)
    assert s.gpu_idle_ms == pytest.approx(0.075)  # 41 + 34 us
    assert s.host_late_share_of_idle == pytest.approx(40 / 75)
    assert (s.launch_call_count, s.launch_call_ms_per_step) == (5, pytest.approx(0.0115))
    assert (s.graph_launch_count, s.graph_kernel_count) == (1, 3)
    json.dumps(s.to_dict())


def test_no_kernels() -> None:
    s = analyze_launch(make_table([launch(0, 5, corr=1)]), steps_of((0, 10)))
    assert (s.kernel_count, s.kernels_each_step, s.median_kernel_us) == (0, (0,), None)
    assert s.share_shorter_than_launch is None
    assert (s.gpu_idle_ms, s.host_late_share_of_idle) == (0.0, None)


def test_zero_length_kernels_without_launches() -> None:
    table = make_table([kernel("z", 1, 0.0), kernel("z", 2, 0.0)])
    s = analyze_launch(table, steps_of((0, 10)))
    assert (s.kernel_count, s.unlaunched_kernel_count, s.median_kernel_us) == (2, 2, 0.0)
    assert (s.queued_count, s.host_late_count, s.host_late_idle_ms) == (0, 0, 0.0)
    assert s.gpu_idle_ms == pytest.approx(0.010)


def test_cpu_only_trace(corpus: Any) -> None:
    table = corpus("cpu_only_rank34")
    s = analyze_launch(table, find_steps(table))
    assert (s.kernel_count, s.launch_call_count, s.gpu_idle_ms) == (0, 0, 0.0)


@pytest.mark.slow
def test_recsys_uses_cuda_graphs(corpus: Any, raw: Any) -> None:
    stem = "v100_recsys_train_rank1"
    s = analyze_launch(corpus(stem), EVERYTHING)
    graph_corrs = {
        corr(e) for e in events(raw(stem), LAUNCH_CATS) if e["name"] == "cudaGraphLaunch"
    }
    from_graph = [e for e in events(raw(stem), KERNEL_CATS) if corr(e) in graph_corrs]
    assert s.graph_launch_count == len(graph_corrs) == 12
    assert s.graph_kernel_count == len(from_graph) == 4464


@pytest.mark.parametrize(
    "stem", ["a100_alexnet_syncs_pageable", "h100_bert_small_infer", "h100_vit_classifier_infer"]
)
def test_host_bound_traces_idle_mostly_host_late(stem: str, corpus: Any) -> None:
    table = corpus(stem)
    s = analyze_launch(table, find_steps(table))
    assert s.host_late_share_of_idle > 0.9
    assert s.host_late_idle_ms <= s.gpu_idle_ms


def test_compute_bound_trace_is_queued(corpus: Any) -> None:
    table = corpus("v100_ddp_convnet_ns_timestamps")
    s = analyze_launch(table, find_steps(table))
    assert s.queued_count > 0.99 * (s.queued_count + s.host_late_count)


def _launches(trace: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    """correlation id -> launch call, runtime calls winning over driver calls."""
    out: dict[Any, dict[str, Any]] = {}
    for e in events(trace, LAUNCH_CATS):
        if corr(e) is not None and (corr(e) not in out or e["cat"] != "cuda_driver"):
            out[corr(e)] = e
    return out


@pytest.mark.parametrize("stem", ["h100_vit_classifier_infer", "mi250_toy_train_rocm"])
def test_launch_delays_match_raw_json(stem: str, corpus: Any, raw: Any) -> None:
    s = analyze_launch(corpus(stem), EVERYTHING)
    trace = raw(stem)
    calls = _launches(trace)
    pairs = [(k, calls[corr(k)]) for k in events(trace, KERNEL_CATS) if corr(k) in calls]
    assert s.launched_kernel_count == len(pairs)
    shorter = [k["dur"] < c["dur"] for k, c in pairs]
    assert s.share_shorter_than_launch == pytest.approx(sum(shorter) / len(shorter))
    delays = [k["ts"] - c["ts"] for k, c in pairs]
    assert s.median_launch_delay_us == pytest.approx(statistics.median(delays), abs=1e-6)
    queued, late = _brute_queued_late(trace, calls)
    assert (s.queued_count, s.host_late_count) == (queued, late)


def _brute_queued_late(trace: dict[str, Any], calls: dict[Any, Any]) -> tuple[int, int]:
    """Walk each stream in start order, tracking the latest end so far."""
    gpu = sorted(events(trace, GPU_CATS), key=lambda e: e["ts"])
    busy_until: dict[Any, float] = {}
    queued = late = 0
    for e in gpu:
        key = (e["args"].get("device"), e["args"].get("stream"))
        prev = busy_until.get(key, float("-inf"))
        if corr(e) in calls:
            if prev > calls[corr(e)]["ts"]:
                queued += 1
            else:
                late += 1
        busy_until[key] = max(prev, e["ts"] + e["dur"])
    return queued, late


def test_kernels_per_step_match_raw_json(corpus: Any, raw: Any) -> None:
    stem = "v100_resnet50_train_workers4"
    table = corpus(stem)
    steps = find_steps(table)
    s = analyze_launch(table, steps)
    ts = [e["ts"] - table.base_us for e in events(raw(stem), KERNEL_CATS)]
    expected = tuple(
        sum(lo <= t < hi for t in ts) for lo, hi in zip(steps.starts_us, steps.ends_us, strict=True)
    )
    assert s.kernels_each_step == expected
    assert s.kernels_per_step == pytest.approx(sum(expected) / len(expected))
