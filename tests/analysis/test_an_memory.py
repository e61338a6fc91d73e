"""Memory analysis: peaks per device against raw JSON, the carried-in level, no events."""

from __future__ import annotations

import json
from itertools import accumulate
from typing import Any

import pytest

from tests.analysis.synth import EVERYTHING, V100, Mem, make_table, steps_of
from torchdoctor.analysis.memory import analyze_memory


def _mem_events(trace: dict[str, Any], device_id: int) -> list[dict[str, Any]]:
    return [
        e["args"]
        for e in trace["traceEvents"]
        if e.get("name") == "[memory]"
        and e.get("args", {}).get("Device Type") == 1
        and e["args"].get("Device Id") == device_id
    ]


def _total_mem(trace: dict[str, Any], device_id: int) -> int:
    return next(d["totalGlobalMem"] for d in trace["deviceProperties"] if d["id"] == device_id)


@pytest.mark.parametrize(
    ("stem", "device_id"), [("v100_ddp_compiled_rank1", 1), ("h100_bert_small_infer", 0)]
)
@pytest.mark.slow
def test_peaks_match_raw_json(stem: str, device_id: int, corpus: Any, raw: Any) -> None:
    s = analyze_memory(corpus(stem), EVERYTHING)
    args = _mem_events(raw(stem), device_id)
    (dev,) = s.devices
    assert (dev.device_id, dev.source, dev.event_count) == (device_id, "totals", len(args))
    peak_alloc = max(a["Total Allocated"] for a in args)
    peak_res = max(a["Total Reserved"] for a in args)
    fullest = max(a["Total Allocated"] for a in args if a["Total Reserved"] == peak_res)
    assert dev.peak_allocated_bytes == dev.trace_peak_allocated_bytes == peak_alloc
    assert dev.peak_reserved_bytes == peak_res
    assert dev.reserved_minus_allocated_at_peak_bytes == peak_res - fullest
    total = _total_mem(raw(stem), device_id)
    assert dev.total_memory_bytes == total
    assert dev.peak_allocated_share == pytest.approx(peak_alloc / total)
    assert s.has_memory_events
    json.dumps(s.to_dict())


def test_ddp_compiled_numbers(corpus: Any) -> None:
    (dev,) = analyze_memory(corpus("v100_ddp_compiled_rank1"), EVERYTHING).devices
    assert (dev.peak_allocated_bytes, dev.peak_reserved_bytes) == (6629508096, 12782141440)


def test_old_traces_use_running_sum_of_sizes(corpus: Any, raw: Any) -> None:
    stem = "v100_resnet50_train_workers0"
    (dev,) = analyze_memory(corpus(stem), EVERYTHING).devices
    sizes = [a["Bytes"] for a in _mem_events(raw(stem), 0)]
    assert dev.source == "running-sum-of-sizes"
    assert dev.peak_allocated_bytes == max(accumulate(sizes))
    assert (dev.peak_reserved_bytes, dev.peak_allocated_share) == (None, None)


def test_no_memory_events(corpus: Any) -> None:
    s = analyze_memory(corpus("a100_alexnet_syncs_pageable"), EVERYTHING)
    assert (s.has_memory_events, s.event_count, s.devices) == (False, 0, ())
    assert "profile_memory=True" in s.note


def test_cpu_memory_only() -> None:
    mem = Mem([1.0], [10], [20], [-1], [0], [10])
    s = analyze_memory(make_table([], memory=mem), steps_of((0, 10)))
    assert (s.has_memory_events, s.event_count, s.devices) == (True, 1, ())


def test_level_carried_into_the_window() -> None:
    mem = Mem(
        ts=[0.0, 10.0, 20.0, 30.0],
        allocated=[100, 50, 70, 400],
        reserved=[200, 200, 300, 500],
        device_id=[0, 0, 0, 0],
        device_type=[1, 1, 1, 1],
        nbytes=[100, -50, 20, 330],
    )
    s = analyze_memory(make_table([], devices=[V100], memory=mem), steps_of((5, 25)))
    (dev,) = s.devices
    # inside [5, 25): the level 100/200 carried from t=0, then 50/200 and 70/300
    assert (dev.peak_allocated_bytes, dev.peak_reserved_bytes) == (100, 300)
    assert dev.reserved_minus_allocated_at_peak_bytes == 230
    assert (dev.trace_peak_allocated_bytes, dev.trace_peak_reserved_bytes) == (400, 500)
    assert (dev.event_count, dev.window_event_count) == (4, 2)
    assert dev.peak_reserved_share == pytest.approx(300 / (16 * 2**30))
