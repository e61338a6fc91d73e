"""The allocator family (``rules/families/allocator.py``): fragmentation, from hand-written
check records."""

from __future__ import annotations

from typing import Any

from tests.rules.run_records import fire, record
from torchdoctor.rules.families import allocator as al

(FRAGMENTATION,) = al.RULES
GIB = 2**30


def gpu(**memory: Any) -> dict[str, Any]:
    return {"device": {"name": "NVIDIA H200"}, "memory": {"total_bytes": 80 * GIB, **memory}}


def test_reserved_far_above_allocated_is_judged_fragmented_for_the_record() -> None:
    mem = gpu(peak_reserved_bytes=10 * GIB, peak_allocated_bytes=4 * GIB, fragmentation=0.6)
    f = fire(FRAGMENTATION, record(gpu=mem))
    assert f is not None and f.id == "memory-fragmentation"
    assert (
        f.title == "reserved memory 6.0 GiB above allocated at the peak (60%), 0 allocator retries"
    )
    assert f.severity == "info" and f.saving_ms_per_step == 0.0


def test_allocator_retries_make_it_a_warning_and_a_tight_cache_alone_is_quiet() -> None:
    retry = gpu(peak_reserved_bytes=10 * GIB, peak_allocated_bytes=9.9 * GIB, alloc_retries=2)
    f = fire(
        FRAGMENTATION, record(gpu={**retry, "memory": {**retry["memory"], "fragmentation": 0.01}})
    )
    assert f is not None and f.severity == "warning" and "2 allocator retries" in f.title
    tight = gpu(peak_reserved_bytes=10 * GIB, peak_allocated_bytes=9.9 * GIB, fragmentation=0.01)
    assert fire(FRAGMENTATION, record(gpu=tight)) is None  # no retry, 0.1 GiB unused
    assert fire(FRAGMENTATION, record()) is None  # a CPU run
