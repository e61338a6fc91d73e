"""One fragmentation judgement: ``memory`` (a snapshot), ``check`` (a run's allocator
statistics) and ``analyze`` (a trace's memory counters) decide by the same function, so they
cannot disagree on the same numbers; a run's measure is an upper bound of the snapshot's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.capture.test_check_rules import record
from torchdoctor.memory.advice import fragmentation_matters
from torchdoctor.memory.analysis import analyze_snapshot
from torchdoctor.memory.fragmentation import FRAGMENTATION, FRAGMENTATION_MIN_BYTES, fragmented
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.run_rules import run_findings

GIB = 1 << 30


def _run_says(reserved: int, unallocated: int) -> bool:
    mem: dict[str, Any] = {
        "peak_reserved_bytes": reserved,
        "peak_allocated_bytes": reserved - unallocated,
        "fragmentation": unallocated / reserved,
        "alloc_retries": 0,
        "total_bytes": 80 * GIB,
    }
    found = run_findings(record(gpu={"memory": mem}))
    return any(f.id == "memory-fragmentation" for f in found)


def _snapshot_says(reserved: int, split_free: int) -> bool:
    # a largest free block big enough for any request: only the split-free share can decide
    return fragmentation_matters(reserved, split_free, split_free, 0, split_free)


@pytest.mark.parametrize("reserved_gib", [2, 4, 8, 40])
@pytest.mark.parametrize("share", [0.1, 0.25, 0.29, 0.3, 0.31, 0.5, 0.9])
def test_check_and_memory_decide_alike_on_the_same_numbers(reserved_gib: int, share: float) -> None:
    reserved = reserved_gib * GIB
    unallocated = int(reserved * share)
    expected = unallocated >= FRAGMENTATION_MIN_BYTES and unallocated >= FRAGMENTATION * reserved
    assert fragmented(reserved, unallocated) == expected
    assert _run_says(reserved, unallocated) == expected
    assert _snapshot_says(reserved, unallocated) == expected


def test_the_rules_read_the_memory_judgements_thresholds() -> None:
    assert th.FRAGMENTATION is FRAGMENTATION
    assert th.FRAGMENTATION_MIN_BYTES is FRAGMENTATION_MIN_BYTES
    assert "FRAGMENTATION" in th.all_thresholds()


def test_the_real_snapshot_is_not_fragmented_by_either_measure(gpt_snapshot: Path) -> None:
    """Reserved minus allocated is 27% of reserved (most of it whole empty segments: cache), and
    the bytes free inside partly used segments are 171 MiB: neither side calls it fragmented."""
    d = analyze_snapshot(gpt_snapshot).devices[0]
    seg = d.segments
    assert seg.split_free_bytes < seg.free_bytes  # the run's measure is the larger one
    assert not d.fragmentation_matters
    assert not _run_says(seg.reserved_bytes, seg.free_bytes)


def test_a_run_never_stays_silent_where_the_snapshot_finds_fragmentation() -> None:
    for reserved_gib in (2, 6, 24):
        reserved = reserved_gib * GIB
        for split_share in (0.1, 0.3, 0.6):
            split = int(reserved * split_share)
            for extra in (0, GIB // 2):
                slack = min(reserved, split + extra)  # whole empty segments add to the slack
                if _snapshot_says(reserved, split):
                    assert _run_says(reserved, slack), (reserved_gib, split_share, extra)
