"""Hostile and odd CUDA memory snapshots, as pickle bytes (small files that ask for a lot)."""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable
from typing import Any

from tests.memory import synth

PROTO = b"\x80\x04"
MIB = 1 << 20


def _dump(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=4)


def snapshot(segments: Any = None, traces: Any = None, **extra: Any) -> dict[str, Any]:
    seg = [synth.segment(1 << 30, [synth.block(1 << 30, 4 * MIB, "active_allocated")])]
    return {
        "segments": seg if segments is None else segments,
        "device_traces": [[synth.entry("alloc", 1 << 30, 4 * MIB, 1)]]
        if traces is None
        else traces,
        "allocator_settings": synth.settings(),
        **extra,
    }


def deep_tuple_key(depth: int = 1_000_000) -> bytes:
    """``{((((0,),),)...): 1}``: one byte per level, and hashing the key recurses in C."""
    return PROTO + b"}" + b"K\x00" + b"\x85" * depth + b"K\x01" + b"s."


def deep_list_size(depth: int = 200_000) -> bytes:
    """A snapshot whose one entry's size is a list nested ``depth`` deep (repr recurses)."""
    return _with_value(
        snapshot(traces=[[{"action": "alloc", "addr": 1 << 30, "size": _MARK}]]),
        b"]" * depth + b"a" * (depth - 1),
    )


_MARK = "PLACEHOLDER-VALUE"


def _with_value(doc: dict[str, Any], value_ops: bytes) -> bytes:
    """``doc`` pickled with the string ``_MARK`` replaced by the object ``value_ops`` builds
    (memoized once, as the string was, so every later memo reference still fits)."""
    raw = _dump(doc)
    mark = b"\x8c" + bytes([len(_MARK)]) + _MARK.encode() + b"\x94"
    assert raw.count(mark) == 1
    return raw.replace(mark, value_ops + b"\x94")


def memo_bomb() -> bytes:
    """9 bytes: an empty dict put in memo slot 2**32 - 1."""
    return PROTO + b"}r\xff\xff\xff\xff."


def shared_segment(refs: int = 30_000, blocks: int = 1000) -> bytes:
    """One segment of ``blocks`` blocks, listed ``refs`` times (a 2-byte reference each)."""
    seg = synth.segment(
        1 << 30, [synth.block((1 << 30) + i * MIB, MIB, "inactive") for i in range(blocks)]
    )
    return _dump(snapshot(segments=[seg] * refs, traces=[[]]))


def shared_frames(blocks: int = 20_000, frames: int = 2_000) -> bytes:
    """Every block holds one frames list of ``frames`` frames (shared: one list, many refs)."""
    stack = [synth.frame(f"/w/f{i}.py", i, "fn") for i in range(frames)]
    blks = [
        synth.block((1 << 30) + i * 4096, 4096, "active_allocated", stack) for i in range(blocks)
    ]
    # One history entry, so the holders of the blocks allocated before it are looked up.
    entry = synth.entry("alloc", (1 << 30) + blocks * 4096, 4096, 1, stack)
    return _dump(snapshot(segments=[synth.segment(1 << 30, blks)], traces=[[entry]]))


def shared_entry(refs: int = 30_000) -> bytes:
    e = synth.entry("alloc", 1 << 30, 4096, 1)
    return _dump(snapshot(traces=[[e] * refs]))


def entry_is_list() -> bytes:
    return _dump(snapshot(traces=[[[1, 2, 3]]]))


def ints_as_segments(n: int = 4_000_000) -> bytes:
    return _dump(snapshot(segments=list(range(n)), traces=[[]]))


def field(where: str, value: Any, **also: Any) -> Callable[[], bytes]:
    """A snapshot with one field replaced by ``value`` (segment, block, entry or frame), and
    the fields in ``also`` set on the same object."""

    def build() -> bytes:
        doc = snapshot(
            traces=[[synth.entry("alloc", 1 << 30, 4096, 1, synth.user_stack("/w/m.py", 3))]]
        )
        seg = doc["segments"][0]
        target = {
            "segment": seg,
            "block": seg["blocks"][0],
            "entry": doc["device_traces"][0][0],
            "frame": doc["device_traces"][0][0]["frames"][1],
        }[where.split(".")[0]]
        target[where.split(".")[1]] = value
        target.update(also)
        return _dump(doc)

    return build


def shared_trace_list() -> bytes:
    trace = [synth.entry("alloc", 1 << 30, 4096, 1)]
    return _dump(snapshot(traces=[trace, trace]))


def many_ooms(n: int = 20_000, live: int = 2_000) -> bytes:
    """``live`` live blocks, then ``n`` OOM entries (each used to copy the live set)."""
    entries = [synth.entry("alloc", (1 << 30) + i * 4096, 4096, i) for i in range(live)]
    entries += [synth.entry("oom", 4096, 1 << 30, live + i, device_free=0) for i in range(n)]
    return _dump(snapshot(traces=[entries]))


def rising_peaks(live: int = 5_000, peaks: int = 20_000) -> bytes:
    """A large live set, then a new peak and a free, again and again (each peak used to copy it)."""
    entries = [synth.entry("alloc", (1 << 30) + i * 4096, 4096, i) for i in range(live)]
    addr, t = 1 << 40, live
    for k in range(peaks):
        entries.append(synth.entry("alloc", addr + k * 8192, 4096 + 8 * (k + 1), t))
        entries.append(synth.entry("free_requested", addr + k * 8192, 4096, t + 1))
        t += 2
    return _dump(snapshot(traces=[entries]))


def long_string_claim() -> bytes:
    """A BINUNICODE8 claiming 2**60 bytes (the reader must not wait for or allocate them)."""
    return PROTO + b"\x8d" + struct.pack("<Q", 1 << 60) + b"abc"
