"""Load a trace file (or a folder of per-rank traces) into ``TraceTable`` columns."""

from __future__ import annotations

import contextlib
import operator
import re
from pathlib import Path
from typing import Any

import numpy as np

from torchdoctor.errors import TraceError
from torchdoctor.trace.events import Event
from torchdoctor.trace.kinds import CATEGORY_KIND, Kind
from torchdoctor.trace.reader import ReadStats, iter_event_chunks
from torchdoctor.trace.table import MemoryEvents, TraceMeta, TraceTable

TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
# Operators whose input dtype decides whether GEMM/conv kernels can use tensor cores.
_DTYPE_OPS = frozenset(
    {
        *("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul"),
        *("aten::linear", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution"),
        *("aten::_convolution", "aten::cudnn_convolution", "aten::_scaled_mm", "aten::addmm_"),
        *("aten::mm_", "aten::scaled_dot_product_attention"),
    }
)
_INT_COLS = ("corr", "ext_id", "device", "stream", "nbytes")
_EVENT_FIELDS = operator.attrgetter("ts", "dur", "cat", "name", "pid", "tid", "args")
_ARG_FIELDS = operator.attrgetter("correlation", "external_id", "device", "stream", "bytes")
_MEM_FIELDS = operator.attrgetter(
    "total_allocated", "total_reserved", "device_id", "device_type", "alloc_bytes"
)


class _Interner:
    """Maps strings (or ids) to dense int32 codes."""

    def __init__(self) -> None:
        self.codes: dict[Any, int] = {}

    def encode(self, values: list[Any]) -> np.ndarray:
        codes = self.codes
        for v in dict.fromkeys(values):  # new values get codes in order of first appearance
            if v not in codes:
                codes[v] = len(codes)
        return np.array([codes[v] for v in values], dtype=np.int32)

    def values(self) -> list[Any]:
        return list(self.codes)


def _int_column(values: list[Any]) -> np.ndarray:
    """int64 array with -1 for missing; tolerates numeric strings and floats (slow path)."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        out = np.full(len(values), -1, dtype=np.int64)
        for i, v in enumerate(values):
            with contextlib.suppress(TypeError, ValueError, OverflowError):
                out[i] = int(float(v))
        return out


def _stream_of(tid: Any) -> int:
    """The 2021 format names GPU threads ``"stream 7"``; current traces use the number."""
    if isinstance(tid, int):
        return tid
    if isinstance(tid, str):
        digits = "".join(ch for ch in tid if ch.isdigit())
        return int(digits) if digits else -1
    return -1


class _Builder:
    """Accumulates columns chunk by chunk, so only one chunk of Event objects is alive at once."""

    def __init__(self) -> None:
        self.names, self.pids, self.tids = _Interner(), _Interner(), _Interner()
        self.cats = _Interner()
        self.cols: dict[str, list[np.ndarray]] = {}
        self.mem: list[np.ndarray] = []
        self.input_types: dict[int, bytes] = {}
        self.malformed = 0
        self.negative_durations = 0

    def add(self, events: list[Event]) -> None:
        xs = [e for e in events if e.ph == "X"]
        if len(xs) and any(e.ts is None for e in xs):
            self.malformed += sum(1 for e in xs if e.ts is None)
            xs = [e for e in xs if e.ts is not None]
        mem = [e for e in events if e.ph == "i" and e.name == "[memory]" and e.ts is not None]
        if mem:
            self._add_memory(mem)
        if xs:
            self._add_complete(xs)

    def _add_memory(self, events: list[Event]) -> None:
        """Memory events as a (n, 6) float64 block: ts, allocated, reserved, device, type, bytes."""
        block = np.empty((len(events), 6), dtype=np.float64)
        block[:, 0] = [e.ts for e in events]
        cols = zip(*map(_MEM_FIELDS, (e.args for e in events)), strict=True)
        for j, vals in enumerate(cols, 1):
            block[:, j] = _int_column(list(vals))
        self.mem.append(block)

    def _add_complete(self, xs: list[Event]) -> None:
        ts, dur, cats, names, pids, tids, args = (
            list(c) for c in zip(*map(_EVENT_FIELDS, xs), strict=True)
        )
        cat_codes = self.cats.encode(cats)
        lut = np.array([CATEGORY_KIND.get(c, Kind.OTHER) for c in self.cats.values()], np.uint8)
        kind = lut[cat_codes]
        durs = np.array(dur, dtype=np.float64)
        neg = durs < 0
        if neg.any():
            self.negative_durations += int(neg.sum())
            durs[neg] = 0.0
        self._push("ts", np.array(ts, dtype=np.float64))
        self._push("dur", durs)
        self._push("kind", kind)
        name_codes = self._encode_names(names)
        self._push("name", name_codes)
        self._push("pid", self.pids.encode(pids))
        self._push("tid", self.tids.encode(tids))
        self._add_args(xs, args, kind, name_codes)

    def _encode_names(self, names: list[Any]) -> np.ndarray:
        try:
            return self.names.encode(names)
        except TypeError:  # an unhashable name (a list, an object): keep its text
            return self.names.encode([n if isinstance(n, str) else str(n) for n in names])

    def _add_args(
        self, xs: list[Event], args: list[Any], kind: np.ndarray, name_codes: np.ndarray
    ) -> None:
        columns = zip(*map(_ARG_FIELDS, args), strict=True)
        arrays = dict(zip(_INT_COLS, (_int_column(list(c)) for c in columns), strict=True))
        gpu = np.isin(kind, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_SYNC))
        for i in np.flatnonzero(gpu & (arrays["stream"] < 0)):
            arrays["stream"][i] = _stream_of(xs[i].tid)
        for i in np.flatnonzero(gpu & (arrays["device"] < 0)):
            pid = xs[i].pid
            arrays["device"][i] = pid if isinstance(pid, int) and 0 <= pid < 64 else 0
        for k in _INT_COLS:
            self._push(k, arrays[k])
        dtype_codes = [c for n, c in self.names.codes.items() if n in _DTYPE_OPS]
        rows = np.flatnonzero((kind == Kind.CPU_OP) & np.isin(name_codes, dtype_codes))
        for i in rows.tolist():
            raw = args[i].input_type
            if len(raw):
                self.input_types[int(arrays["ext_id"][i])] = bytes(raw)

    def _push(self, key: str, arr: np.ndarray) -> None:
        self.cols.setdefault(key, []).append(arr)

    def column(self, key: str, dtype: Any) -> np.ndarray:
        parts = self.cols.get(key)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def load_trace(path: str | Path) -> TraceTable:
    """Read one trace file (.json or .json.gz, gzip detected by content) into a TraceTable.

    Raises TraceError with a one-line message for anything that is not a readable trace.
    """
    p = Path(path)
    stats = ReadStats()
    builder = _Builder()
    for chunk in iter_event_chunks(p, stats):
        builder.add(chunk)
    return _finish(p, builder, stats)


def _finish(p: Path, b: _Builder, stats: ReadStats) -> TraceTable:
    ts = b.column("ts", np.float64)
    order = np.argsort(ts, kind="stable")
    base = float(ts[order[0]]) if len(ts) else 0.0
    sort = {k: b.column(k, np.int64)[order] for k in ("dur", "kind", "name", "pid", "tid")}
    ints = {k: b.column(k, np.int64)[order] for k in _INT_COLS}
    mem = _memory(b.mem, base)
    notes = _notes(b, stats)
    meta = _meta(p, stats)
    return TraceTable(
        meta=meta,
        base_us=base,
        ts=ts[order] - base,
        dur=sort["dur"].astype(np.float64),
        kind=sort["kind"].astype(np.uint8),
        name=sort["name"].astype(np.int32),
        names=b.names.values(),
        pid=sort["pid"].astype(np.int32),
        pids=b.pids.values(),
        tid=sort["tid"].astype(np.int32),
        tids=b.tids.values(),
        corr=ints["corr"],
        ext_id=ints["ext_id"],
        device=ints["device"].astype(np.int16),
        stream=ints["stream"].astype(np.int32),
        nbytes=ints["nbytes"],
        memory=mem,
        input_types=b.input_types,
        notes=notes,
    )


def _memory(blocks: list[np.ndarray], base: float) -> MemoryEvents:
    arr = np.concatenate(blocks) if blocks else np.zeros((0, 6), dtype=np.float64)
    order = np.argsort(arr[:, 0], kind="stable")
    arr = arr[order]
    col = arr.T
    return MemoryEvents(
        ts=col[0] - base,
        total_allocated=col[1].astype(np.int64),
        total_reserved=col[2].astype(np.int64),
        device_id=col[3].astype(np.int16),
        device_type=col[4].astype(np.int16),
        nbytes=col[5].astype(np.int64),
    )


def _notes(b: _Builder, stats: ReadStats) -> list[str]:
    notes = []
    if stats.malformed_events or b.malformed:
        notes.append(f"skipped {stats.malformed_events + b.malformed} malformed events")
    if b.negative_durations:
        notes.append(f"clamped {b.negative_durations} negative durations to 0")
    unknown = sorted(str(c) for c in b.cats.values() if c and c not in CATEGORY_KIND)
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
