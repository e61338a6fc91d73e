"""The allocator family (``rules/families/allocator.py``): fragmentation and running out of
memory, from hand-written check records."""

from __future__ import annotations

from typing import Any

from tests.rules.run_records import fire, record
from torchdoctor.rules.families import allocator as al

FRAGMENTATION, OOM = al.RULES
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


def test_out_of_memory_says_what_filled_it_and_names_the_snapshot_holders() -> None:
    oom = {
        "tried_bytes": 2 * GIB,
        "allocated_bytes": 30 * GIB,
        "memory_analysis": {
            "text": "12 GiB held by attention",
            "top_holders": [{"where": "m.py:8"}],
        },
        "largest_blocks": [{"where": "other.py:1"}],
    }
    sgd = {"class": "SGD", "param_bytes": 5 * GIB}
    f = fire(OOM, record(oom=oom, config={"optimizers": [sgd]}))
    assert f is not None and f.id == "out-of-memory" and f.severity == "critical"
    parts = (
        "tried to allocate 2.00 GiB; weights+grads ~10.00 GiB; "
        "activations and temporaries ~20.00 GiB"
    )
    assert f.title == f"out of memory: {parts}"
    assert f.explanation.startswith(f"What filled the memory: {parts}. Who held it")
    assert f.explanation.endswith("(docs/memory.md). Snapshot: 12 GiB held by attention.")
    assert f.where == ["m.py:8"] and f.saving_ms_per_step == 100.0  # the run stopped


def test_no_out_of_memory_without_a_failed_allocation() -> None:
    assert (
        fire(OOM, record(gpu=gpu(peak_reserved_bytes=10 * GIB, peak_allocated_bytes=9 * GIB)))
        is None
    )
    bare = fire(OOM, record(oom={"tried_bytes": GIB}))
    assert bare is not None and bare.title == "out of memory: tried to allocate 1.00 GiB"
    assert bare.explanation.endswith("(docs/memory.md).")  # no snapshot was read
