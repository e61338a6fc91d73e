"""The one judgement of fragmentation, for every source that can see it: a memory snapshot
(``torchdoctor memory``: bytes free inside partly used segments), a trace's memory counters and a
``check`` run's allocator statistics (reserved minus allocated at the peak).

Cached-but-unallocated bytes matter when they are a large share of what the allocator reserved
and large in absolute terms; below that the cache is ordinary headroom between steps. The run and
the trace see only reserved minus allocated, which also counts whole empty segments (plain cache,
reusable by any request), so it is an upper bound of the snapshot's measure: with one threshold,
``check`` never stays silent where ``memory`` would find fragmentation. (The snapshot of
``gpt_lm_train_step`` holds 1.09 GiB reserved but unallocated, 27% of reserved, of which only
171 MiB sits inside partly used segments: not fragmented, by either measure.)

``memory`` also reports fragmentation when the largest request needed a new segment while the
cache held enough bytes in smaller blocks (``advice.fragmentation_matters``): direct evidence.
"""

from __future__ import annotations

from torchdoctor.threshold import Threshold

FRAGMENTATION = Threshold(
    0.30,
    "cached but unallocated bytes at 30% of reserved or more: below that the cache is ordinary "
    "headroom between steps; expandable segments help above it",
)
FRAGMENTATION_MIN_BYTES = Threshold(
    1 << 30, "and at least 1 GiB of them: a small pool is never worth an allocator setting"
)


def fragmented(reserved_bytes: float, unallocated_bytes: float) -> bool:
    """True when ``unallocated_bytes`` of ``reserved_bytes`` (cached by the allocator but not
    handed out) are both a large share and a large amount."""
    return (
        reserved_bytes > 0
        and unallocated_bytes >= FRAGMENTATION_MIN_BYTES
        and unallocated_bytes >= FRAGMENTATION * reserved_bytes
    )
