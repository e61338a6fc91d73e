"""Allocator fixes for fragmentation, each with its evidence, never one that is already on.

``PYTORCH_CUDA_ALLOC_CONF`` knobs (docs: pytorch.org/docs/stable/notes/cuda.html#memory-management):
``expandable_segments:True`` lets a segment grow in place instead of cudaMalloc'ing new fixed-size
ones, the standard cure for fragmentation; ``max_split_size_mb`` stops the allocator from carving
large cached blocks into pieces no large request can reuse; ``garbage_collection_threshold`` frees
unused cached blocks before reaching the limit, instead of a full flush at out-of-memory time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchdoctor.memory.fragmentation import fragmented

# The allocator refuses max_split_size_mb values at or below 20 MiB.
MIN_SPLIT_MB = 21
GC_THRESHOLD = 0.8
MIB = 1 << 20


@dataclass(frozen=True)
class AllocatorSettings:
    """What the snapshot says was on (``known`` False when it did not record its settings)."""

    known: bool
    conf: str
    expandable_segments: bool
    max_split_size_bytes: int | None
    garbage_collection_threshold: float


@dataclass(frozen=True)
class Fix:
    """One knob to set, the line to paste, and the numbers that call for it."""

    knob: str
    value: str
    env: str
    evidence: str


def read_settings(raw: Any) -> AllocatorSettings:
    """``allocator_settings`` from the snapshot, falling back to parsing its conf string."""
    if not isinstance(raw, dict):
        return AllocatorSettings(False, "", False, None, 0.0)
    conf = str(raw.get("PYTORCH_CUDA_ALLOC_CONF", "") or "")
    parsed = dict(p.split(":", 1) for p in conf.replace(" ", "").split(",") if ":" in p)
    expandable = bool(raw.get("expandable_segments")) or parsed.get("expandable_segments") == "True"
    split = raw.get("max_split_size", -1)
    split_bytes = int(split) if isinstance(split, int) and 0 < split < (1 << 62) else None
    if split_bytes is None and "max_split_size_mb" in parsed:
        split_bytes = int(float(parsed["max_split_size_mb"]) * MIB)
    gc = float(
        raw.get("garbage_collection_threshold", 0.0)
        or parsed.get("garbage_collection_threshold", 0.0)
    )
    return AllocatorSettings(True, conf, expandable, split_bytes, gc)


def _fix(settings: AllocatorSettings, knob: str, value: str, evidence: str) -> Fix:
    """Set ``knob`` to ``value``: the line is the snapshot's conf with that knob replaced."""
    parts = [
        p for p in settings.conf.replace(" ", "").split(",") if p and not p.startswith(knob + ":")
    ]
    env = "PYTORCH_CUDA_ALLOC_CONF=" + ",".join([*parts, f"{knob}:{value}"])
    return Fix(knob, value, env, evidence)


def fragmentation_matters(
    reserved_bytes: int,
    split_free_bytes: int,
    largest_free_block_bytes: int,
    largest_request_bytes: int,
    free_bytes: int,
) -> bool:
    """Free memory is in pieces: much of it inside partly used segments, or enough cached bytes
    for the largest request but no block that big (so it needed a new cudaMalloc)."""
    split = fragmented(reserved_bytes, split_free_bytes)
    no_fit = largest_free_block_bytes < largest_request_bytes <= free_bytes
    return split or no_fit


def _split_mb(largest_request_bytes: int) -> int:
    mb = max(MIN_SPLIT_MB, largest_request_bytes // MIB)
    return 1 << (mb.bit_length() - 1) if mb >= 32 else MIN_SPLIT_MB


def fixes(
    settings: AllocatorSettings,
    *,
    reserved_bytes: int,
    free_bytes: int,
    split_free_bytes: int,
    largest_free_block_bytes: int,
    largest_request_bytes: int,
    oom: bool,
) -> tuple[Fix, ...]:
    """The fixes that apply, in the order to try them; empty when fragmentation does not matter."""
    matters = fragmentation_matters(
        reserved_bytes,
        split_free_bytes,
        largest_free_block_bytes,
        largest_request_bytes,
        free_bytes,
    )
    if not (oom or matters):
        return ()
    gib = 1 << 30
    found: list[Fix] = []
    evidence = (
        f"{free_bytes / gib:.2f} GiB of {reserved_bytes / gib:.2f} GiB reserved is cached but "
        f"unallocated, {split_free_bytes / gib:.2f} GiB of it inside partly used segments; largest free block {largest_free_block_bytes / MIB:.0f} MiB"
        + (
            f" vs largest request {largest_request_bytes / MIB:.0f} MiB"
            if largest_request_bytes
            else ""
        )
    )
    if not settings.expandable_segments:
        found.append(_fix(settings, "expandable_segments", "True", evidence))
    if settings.max_split_size_bytes is None and largest_request_bytes > largest_free_block_bytes:
        mb = _split_mb(largest_request_bytes)
        found.append(
            _fix(
                settings,
                "max_split_size_mb",
                str(mb),
                f"cached blocks are split below the largest request ({largest_request_bytes / MIB:.0f} MiB); "
                f"blocks over {mb} MiB would stay whole for it",
            )
        )
    if oom and settings.garbage_collection_threshold <= 0:
        found.append(
            _fix(
                settings,
                "garbage_collection_threshold",
                str(GC_THRESHOLD),
                "the run hit out-of-memory with cached blocks unused; reclaim them earlier",
            )
        )
    return tuple(found)
