"""Load a trace file (or a folder of per-rank traces) into ``TraceTable`` columns."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from torchdoctor.errors import TraceError
from torchdoctor.trace.columns import INT_COLS, ChunkColumns, Codes, Interned, chunk_columns
from torchdoctor.trace.events import TOO_DEEP, BadChunk
from torchdoctor.trace.kinds import CATEGORY_KIND
from torchdoctor.trace.parallel import ordered_map
from torchdoctor.trace.prefetch import helper_for
from torchdoctor.trace.reader import (
    NeedBytes,
    ReadStats,
    Skipped,
    chunk_bytes,
    footer_keys,
    iter_json_chunks,
    join_chunks,
    too_deep,
)
from torchdoctor.trace.table import MemoryEvents, TraceMeta, TraceTable

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_BYTE_POS = re.compile(r"\s*\(byte \d+\)")
_BLOCK_BYTES = 8 << 20
# The TraceTable's dtype of each column (its contract).
_DTYPES = {
    **dict.fromkeys(("ts", "dur"), np.float64),
    "kind": np.uint8,
    **dict.fromkeys(("name", "pid", "tid", "stream"), np.int32),
    **dict.fromkeys(("corr", "ext_id", "nbytes"), np.int64),
    "device": np.int16,
}


def _remap(table: Codes, part: Interned) -> np.ndarray:
    """The chunk's codes translated into ``table``'s codes (new values appended in order)."""
    lut = np.fromiter(map(table.__getitem__, part.values), np.int32, count=len(part.values))
    return lut.take(part.codes)  # not lut[codes]: see arrays.unique_codes


class _Builder:
    """Joins the chunks' columns in file order, re-interning their strings into shared tables."""

    def __init__(self) -> None:
        self.names = Codes()
        self.pids = Codes()
        self.tids = Codes()
        self.cats: dict[Any, int] = {}
        self.cols: dict[str, list[np.ndarray]] = {}
        self._small: dict[str, tuple[int, int]] = {}  # (index of first small part, their bytes)
        self.mem: list[np.ndarray] = []
        self.input_types: dict[int, bytes] = {}
        self.shapes: dict[int, tuple[str, bytes, bytes]] = {}
        self.malformed = 0
        self.negative_durations = 0

    def add(self, c: ChunkColumns) -> None:
        for key, arr in (("ts", c.ts), ("dur", c.dur), ("kind", c.kind), *c.ints.items()):
            # Parts are kept in the table's dtypes: 59 bytes a row instead of 88 on big traces.
            self._push(key, arr.astype(_DTYPES[key], copy=False))
        for key, table, part in (
            ("name", self.names, c.name),
            ("pid", self.pids, c.pid),
            ("tid", self.tids, c.tid),
        ):
            self._push(key, _remap(table, part))
        for cat in c.cats:
            self.cats.setdefault(cat, len(self.cats))
        if len(c.memory):
            self.mem.append(c.memory)
        self.input_types.update(c.input_types)
        self.shapes.update(c.shapes)
        self.malformed += c.malformed
        self.negative_durations += c.negative_durations

    def _push(self, key: str, arr: np.ndarray) -> None:
        parts = self.cols.setdefault(key, [])
        parts.append(arr)
        # Merge the recent small per-chunk parts into one block now and then. Small arrays live
        # in the malloc heap, and a heap of freed holes would stay resident after the final
        # concatenation; blocks this size are mmap'd and go back to the system when freed.
        first_small, small_bytes = self._small.get(key, (0, 0))
        small_bytes += arr.nbytes
        if small_bytes >= _BLOCK_BYTES:
            parts[first_small:] = [np.concatenate(parts[first_small:])]
            first_small, small_bytes = len(parts), 0
        self._small[key] = (first_small, small_bytes)

    def take(self, key: str) -> np.ndarray:
        """The whole column (the parts are dropped, so a column is never held twice)."""
        parts = self.cols.pop(key, [])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=_DTYPES[key])


def load_trace(path: str | Path, parallel: bool = True) -> TraceTable:
    """Read one trace file (.json or .json.gz, gzip detected by content) into a TraceTable.

    With ``parallel`` (the default), a forked helper decodes part of the chunks of a file bigger
    than one chunk when a CPU is idle (or the one ``prefetch`` started); the table is the same
    either way. Raises TraceError with a one-line message for anything that is not a readable
    trace.
    """
    p = Path(path)
    stats = ReadStats()
    builder = _Builder()
    try:
        for columns in decoded_chunks(p, stats, parallel):
            builder.add(columns)
    except NeedBytes:  # a chunk the helper had was needed here after all: read it all again
        return load_trace(p, parallel=False)
    return _finish(p, builder, stats)


def decoded_chunks(p: Path, stats: ReadStats, parallel: bool) -> Iterator[ChunkColumns]:
    """The columns of each chunk in file order, re-joining chunks cut at a false boundary.

    ``chunk_columns`` returns a ``BadChunk`` for a chunk that is not valid JSON.

    Each chunk starts at a true event boundary (induction: the first does, and a chunk that
    decodes ends at one). So a chunk that fails as truncated was cut inside an event; one with
    trailing characters holds the array's true end; any other syntax error is in the file.
    """
    carry: bytearray | None = None  # a chunk that ended inside an event, waiting for the next
    helper = helper_for(p) if parallel else None
    # The chunks the helper has claimed are cut but not copied out (see ``Skipped``).
    chunks = iter_json_chunks(p, stats, helper.taken if helper is not None else None)
    # closing(): on an error the helper is stopped now, not when the traceback is collected
    with contextlib.closing(ordered_map(chunk_columns, chunks, helper)) as rs:
        for raw, result in rs:
            chunk = raw
            if carry is not None:
                chunk, carry = join_chunks(carry, chunk_bytes(raw)), None
                result = chunk_columns(chunk)
            if not isinstance(result, BadChunk):
                yield result
            elif result.trailing_at >= 0:
                chunk = chunk_bytes(chunk)
                end = chunk.rfind(b"]", 0, result.trailing_at) + 1  # the array's true end
                yield _decoded(p, chunk[:end])
                rest = bytes(chunk[end:-1]) + _text_after(raw, rs, stats)
                stats.tail_keys = footer_keys(rest, stats.is_array, p)
                break
            elif result.truncated:
                carry = chunk_bytes(chunk)
            elif result is TOO_DEEP:
                raise too_deep(p)
            elif raw is stats.tail_chunk and stats.tail_keys is None:
                # The file ends inside an event (no "]" and closing keys after it): a file cut
                # short, whatever msgspec says of the last bytes ("expected ',' or '}'").
                raise TraceError(f"{p}: truncated or invalid JSON in traceEvents")
            else:
                raise TraceError(f"{p}: invalid JSON in traceEvents: {_reason(result)}")
    if carry is not None or stats.tail_keys is None:
        raise TraceError(f"{p}: truncated or invalid JSON in traceEvents")
    stats.top_level.update(stats.tail_keys)


def _decoded(p: Path, data: bytearray) -> ChunkColumns:
    result = chunk_columns(data)
    if isinstance(result, BadChunk):  # pragma: no cover - msgspec parsed this prefix already
        raise TraceError(f"{p}: invalid JSON in traceEvents: {_reason(result)}")
    return result


def _text_after(
    raw: bytearray | Skipped, rest: Iterator[tuple[bytearray | Skipped, Any]], stats: ReadStats
) -> bytes:
    """The file's text after chunk ``raw``'s events (the chunks left, then the tail)."""
    parts = []
    while raw is not stats.tail_chunk:
        parts.append(b",")
        raw = next(rest)[0]
        parts.append(bytes(chunk_bytes(raw)[1:-1]))
    parts.append(stats.tail_rest)
    return b"".join(parts)


def _reason(bad: BadChunk) -> str:
    """msgspec's message without its byte offset (which counts from the chunk, not the file)."""
    return _BYTE_POS.sub("", bad.message)


def _finish(p: Path, b: _Builder, stats: ReadStats) -> TraceTable:
    ts = b.take("ts")
    order = np.argsort(ts, kind="stable")
    ts = ts.take(order)
    base = float(ts[0]) if len(ts) else 0.0
    ts -= base
    # One column at a time, so the peak is the table plus one column, not two tables; ``take``
    # gathers with about 15% fewer instructions than ``column[order]``.
    cols = {k: b.take(k).take(order) for k in ("dur", "kind", "name", "pid", "tid", *INT_COLS)}
    return TraceTable(
        meta=_meta(p, stats),
        base_us=base,
        ts=ts,
        names=list(b.names),
        pids=list(b.pids),
        tids=list(b.tids),
        memory=_memory(b.mem, base),
        input_types=b.input_types,
        shapes=b.shapes,
        notes=_notes(b),
        **cols,
    )


def _memory(blocks: list[np.ndarray], base: float) -> MemoryEvents:
    """The memory events sorted by time; empties ``blocks`` as it goes, to keep the peak low."""
    arr = np.concatenate(blocks) if blocks else np.zeros((0, 6), dtype=np.float64)
    blocks.clear()
    arr = arr[np.argsort(arr[:, 0], kind="stable")]
    ts = arr[:, 0] - base
    ints = {j: arr[:, j].astype(np.int64) for j in (1, 2, 5)}
    small = {j: arr[:, j].astype(np.int16) for j in (3, 4)}
    del arr
    return MemoryEvents(
        ts=ts,
        total_allocated=ints[1],
        total_reserved=ints[2],
        device_id=small[3],
        device_type=small[4],
        nbytes=ints[5],
    )


def _notes(b: _Builder) -> list[str]:
    notes = []
    if b.malformed:
        notes.append(f"skipped {b.malformed} malformed events")
    if b.negative_durations:
        notes.append(f"clamped {b.negative_durations} negative durations to 0")
    unknown = sorted(str(c) for c in b.cats if c and c not in CATEGORY_KIND)
    if unknown:
        shown = ", ".join(unknown[:5])
        notes.append(f"events of unknown categories kept as 'other': {shown}")
    return notes


def _meta(p: Path, stats: ReadStats) -> TraceMeta:
    top = stats.top_level
    dist = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else {}
    rank = _as_int(dist.get("rank")) if dist else None
    if rank is None:
        m = _RANK_IN_NAME.search(p.name)
        rank = int(m.group(1)) if m else None
    devices = top.get("deviceProperties")
    return TraceMeta(
        path=str(p),
        rank=rank,
        world_size=_as_int(dist.get("world_size")) if dist else None,
        backend=str(dist["backend"]) if dist and "backend" in dist else None,
        devices=[d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else [],
        top_level={k: v for k, v in top.items() if k not in ("deviceProperties", "INFO")},
        json_bytes=stats.bytes_read,
    )


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.isdigit():
        return int(v)
    return None


def find_rank_files(folder: str | Path) -> list[Path]:
    """The trace files in a folder (not recursive), sorted by name."""
    d = Path(folder)
    files = sorted(f for f in d.iterdir() if f.is_file() and f.name.endswith((".json", ".json.gz")))
    if not files:
        raise TraceError(f"{d}: no .json or .json.gz trace files in this folder")
    return files
