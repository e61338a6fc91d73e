"""Turn one chunk of decoded events into numpy columns, with strings interned chunk-locally.

A chunk's columns are self-contained (codes index the chunk's own string lists), so a chunk can
be built in another process and sent back; ``load`` re-interns the lists into the trace's tables.
The work per event is a handful of C-level ``map(attrgetter)`` passes, not Python loops.
"""

# Annotations evaluated, not strings: typing.NamedTuple compiles each string one (0.4M
# instructions a field, at every start-up).

import contextlib
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any, NamedTuple

import msgspec
import numpy as np

from torchdoctor.trace.arrays import member
from torchdoctor.trace.events import BadChunk, Event, Instant, decode_events
from torchdoctor.trace.kinds import CATEGORY_KIND, Kind

# Operators whose input dtype decides whether GEMM/conv kernels can use tensor cores.
DTYPE_OPS = frozenset(
    {
        *("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul"),
        *("aten::linear", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution"),
        *("aten::_convolution", "aten::cudnn_convolution", "aten::_scaled_mm", "aten::addmm_"),
        *("aten::mm_", "aten::scaled_dot_product_attention"),
    }
)
# Operators whose recorded shapes give the bytes a GEMM or attention kernel moves (the ops that
# launch the kernels: the innermost ones, so a linear -> addmm chain is counted once).
SHAPE_OPS = frozenset(
    {
        *("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm"),
        *("aten::_scaled_dot_product_flash_attention", "aten::_flash_attention_forward"),
        *("aten::_scaled_dot_product_efficient_attention", "aten::_efficient_attention_forward"),
        *("aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_attention_math"),
    }
)
# Elementwise operators (one memory-bound kernel each in eager mode) whose recorded shapes give
# the bytes their kernel reads and writes (``analysis/elementwise_traffic.py``).
TRAFFIC_OPS = frozenset(
    {
        *("aten::mul", "aten::add", "aten::sub", "aten::div", "aten::copy_", "aten::pow"),
        *("aten::neg", "aten::rsqrt", "aten::sqrt", "aten::exp", "aten::silu", "aten::gelu"),
        *("aten::relu", "aten::sigmoid", "aten::tanh", "aten::mul_", "aten::add_", "aten::div_"),
    }
)
ELEMENT_BYTES = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "signed char": 1,
    "unsigned char": 1,
    "int": 4,
    "long int": 8,
}
"""Bytes per element of the dtypes ``Input type`` names (``c10::BFloat16``...)."""
_RAW_JSON = msgspec.json.Decoder()
_SHAPED_OPS = SHAPE_OPS | TRAFFIC_OPS
_RECORDED_OPS = DTYPE_OPS | _SHAPED_OPS
INT_COLS = ("corr", "ext_id", "device", "stream", "nbytes")
_ARG_ATTRS = ("correlation", "external_id", "device", "stream", "bytes")
_MEM_ATTRS = ("total_allocated", "total_reserved", "device_id", "device_type", "alloc_bytes")
_GPU_KINDS = np.array((Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_SYNC), dtype=np.uint8)
_get = {a: attrgetter(a) for a in ("ts", "dur", "cat", "name", "pid", "tid", "args")}


# A named tuple: analyze imports it before any trace (rules/spec.py says what a dataclass costs).
class Interned(NamedTuple):
    """Codes (int32, one per row) into ``values`` (distinct values in order of first appearance)."""

    codes: np.ndarray
    values: list[Any]


# A named tuple: analyze imports it before any trace (rules/spec.py says what a dataclass costs).
class ChunkColumns(NamedTuple):
    """The complete (``ph: X``) and ``[memory]`` events of one chunk, in file order."""

    ts: np.ndarray
    """Start, microseconds as written in the file (float64)."""
    dur: np.ndarray
    """Duration, microseconds, negative values clamped to 0 (float64)."""
    kind: np.ndarray
    """``Kind`` (uint8)."""
    name: Interned
    pid: Interned
    tid: Interned
    cats: list[Any]
    """Distinct categories of the complete events (for the unknown-category note)."""
    ints: dict[str, np.ndarray]
    """``INT_COLS``: correlation, External id, device, stream, bytes (int64, -1 if absent)."""
    memory: np.ndarray
    """(n, 6) float64: ts, allocated, reserved, device id, device type, bytes."""
    input_types: dict[int, bytes]
    shapes: dict[int, tuple[str, bytes, bytes]]
    """``SHAPE_OPS`` rows by External id: (operator, raw ``Input Dims``, raw ``Input type``)."""
    malformed: int = 0
    negative_durations: int = 0


def chunk_columns(data: bytes | bytearray) -> ChunkColumns | BadChunk:
    """Decode one JSON array of events into columns, or say why it is not valid JSON."""
    decoded = decode_events(data)
    if isinstance(decoded, BadChunk):
        return decoded
    events, malformed = decoded
    return build_columns(events, malformed)


def build_columns(events: list[Any], malformed: int = 0) -> ChunkColumns:
    """Columns of the complete and memory events in ``events`` (others are ignored)."""
    xs = [e for e in events if type(e) is Event]
    ts = _float_column(xs, "ts")
    dur = _float_column(xs, "dur")
    with np.errstate(over="ignore", invalid="ignore"):  # inf + -inf, 1e308 + 1e308
        placed = np.isfinite(ts + dur)
    if not placed.all():
        # ts was null, absent, "nan", infinite or beyond a double (an int over 1e308), or dur
        # was not a finite number: such an event cannot be placed in time.
        keep = np.flatnonzero(placed).tolist()
        malformed += len(xs) - len(keep)
        xs = [xs[i] for i in keep]
        ts, dur = ts[keep], dur[keep]
    mem = [e for e in events if type(e) is Instant and e.name == "[memory]" and e.ts is not None]
    mem_ts = _float_column(mem, "ts")
    if not np.isfinite(mem_ts).all():  # dropped without a finite time, as without a time
        finite = np.flatnonzero(np.isfinite(mem_ts))
        mem, mem_ts = [mem[i] for i in finite.tolist()], mem_ts[finite]
    neg = dur < 0
    negative = int(neg.sum())
    if negative:
        dur[neg] = 0.0
    n = len(xs)
    cats = intern(map(_get["cat"], xs), n)
    lut = np.array([CATEGORY_KIND.get(c, Kind.OTHER) for c in cats.values], dtype=np.uint8)
    kind = lut[cats.codes] if n else np.zeros(0, dtype=np.uint8)
    names = _intern_names(xs)
    args = list(map(_get["args"], xs))
    ints = {k: int_column(args, a) for k, a in zip(INT_COLS, _ARG_ATTRS, strict=True)}
    _fill_gpu_location(xs, kind, ints)
    input_types, shapes = _recorded_inputs(args, kind, names, ints["ext_id"])
    return ChunkColumns(
        ts=ts,
        dur=dur,
        kind=kind,
        name=names,
        pid=intern(map(_get["pid"], xs), n),
        tid=intern(map(_get["tid"], xs), n),
        cats=cats.values,
        ints=ints,
        memory=_memory_block(mem, mem_ts),
        input_types=input_types,
        shapes=shapes,
        malformed=malformed,
        negative_durations=negative,
    )


def decode_shapes(raw_dims: bytes, raw_types: bytes) -> tuple[Any, Any] | None:
    """The ``Input Dims`` and ``Input type`` the loader kept raw for a ``SHAPE_OPS`` or
    ``TRAFFIC_OPS`` operator, decoded (no types: ``[]``); None when either is not JSON."""
    try:
        return _RAW_JSON.decode(raw_dims), _RAW_JSON.decode(raw_types or b"[]")
    except msgspec.DecodeError:
        return None


class Codes(dict[Any, int]):
    """A value's code is its order of first appearance; a new value gets the next code."""

    def __missing__(self, value: Any) -> int:
        code = self[value] = len(self)
        return code


def intern(values: Iterable[Any], count: int = -1) -> Interned:
    """Dense codes for ``values`` in order of first appearance (values must be hashable).

    One C-level pass: ``dict.__getitem__`` calls Python (``__missing__``) only for new values.
    """
    table = Codes()
    codes = np.fromiter(map(table.__getitem__, values), dtype=np.int32, count=count)
    return Interned(codes, list(table))


def _intern_names(xs: list[Event]) -> Interned:
    try:
        names = intern(map(_get["name"], xs), len(xs))
    except TypeError:  # an unhashable name (a list, an object): keep its JSON text
        return intern([name_text(n) for n in map(_get["name"], xs)])
    if not names.values or set(map(type, names.values)) == {str}:  # one C-level pass
        return names
    # A number or null as a name: every name is a string from here on (5 and "5" are one name).
    again = intern(name_text(v) for v in names.values)
    return Interned(again.codes[names.codes], again.values)


def name_text(value: Any) -> str:
    """A name as a string: a string as it is, anything else as its JSON text."""
    if isinstance(value, str):
        return value
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, RecursionError, msgspec.EncodeError):
        return f"<{type(value).__name__}>"


def _float_column(events: Sequence[Event] | Sequence[Instant], attr: str) -> np.ndarray:
    """float64 column of a numeric attribute; None becomes NaN, an int beyond a double inf."""
    try:
        return np.fromiter(map(_get[attr], events), dtype=np.float64, count=len(events))
    except OverflowError:  # an integer above 1.8e308: msgspec keeps it a Python int
        return np.array([_as_float(v) for v in map(_get[attr], events)], dtype=np.float64)


def _as_float(v: Any) -> float:
    try:
        return float("nan") if v is None else float(v)
    except OverflowError:
        return float("inf")


def int_column(objs: list[Any], attr: str) -> np.ndarray:
    """int64 column of ``attr`` with -1 for missing; tolerates numeric strings and floats."""
    get = attrgetter(attr)
    try:
        return np.fromiter(map(get, objs), dtype=np.int64, count=len(objs))
    except (TypeError, ValueError, OverflowError):
        values = list(map(get, objs))
        try:
            return np.array(values, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            out = np.full(len(values), -1, dtype=np.int64)
            for i, v in enumerate(values):
                with contextlib.suppress(TypeError, ValueError, OverflowError):
                    # ints as they are (float() would round ids above 2**53)
                    out[i] = v if isinstance(v, int) else int(float(v))
            return out


def _fill_gpu_location(xs: list[Event], kind: np.ndarray, ints: dict[str, np.ndarray]) -> None:
    """Device activities without stream/device args (the 2021 format) take them from tid/pid."""
    gpu = member(kind, _GPU_KINDS)
    stream, device = ints["stream"], ints["device"]
    for i in np.flatnonzero(gpu & (stream < 0)).tolist():
        stream[i] = _stream_of(xs[i].tid)
    for i in np.flatnonzero(gpu & (device < 0)).tolist():
        pid = xs[i].pid
        device[i] = pid if isinstance(pid, int) and 0 <= pid < 64 else 0


def _stream_of(tid: Any) -> int:
    """The 2021 format names GPU threads ``"stream 7"``; current traces use the number."""
    if isinstance(tid, int):
        return tid
    if isinstance(tid, str):
        digits = "".join(ch for ch in tid if ch.isdigit())
        return int(digits) if digits else -1
    return -1


def _memory_block(events: Sequence[Instant], ts: np.ndarray) -> np.ndarray:
    """Memory events (their times ``ts``) as a (n, 6) float64 block: ts, allocated, reserved,
    device, type, bytes."""
    block = np.empty((len(events), 6), dtype=np.float64)
    block[:, 0] = ts
    args = list(map(_get["args"], events))
    for j, attr in enumerate(_MEM_ATTRS, 1):
        block[:, j] = int_column(args, attr)
    return block


def _recorded_inputs(
    args: list[Any], kind: np.ndarray, names: Interned, ext_id: np.ndarray
) -> tuple[dict[int, bytes], dict[int, tuple[str, bytes, bytes]]]:
    """By External id, in one pass over the operators named in ``_RECORDED_OPS``: the raw
    ``Input type`` JSON of the ``DTYPE_OPS`` (GEMM/conv), and the operator name with the raw
    ``Input Dims`` and ``Input type`` of the ``SHAPE_OPS`` and ``TRAFFIC_OPS``."""
    codes = [i for i, n in enumerate(names.values) if n in _RECORDED_OPS]
    if not codes:
        return {}, {}
    rows = np.flatnonzero((kind == Kind.CPU_OP) & member(names.codes, codes))
    ends = (args[rows[0]], args[rows[-1]]) if len(rows) else ()
    if not any(len(a.input_type) or len(a.input_dims) for a in ends):
        # record_shapes is one setting for a whole profile: when neither the first nor the last
        # of these operators has its inputs recorded, none has (the loop would skip them one
        # by one: 9M instructions of an analyze of the 14,110 in v100_ddp_compiled_rank1).
        return {}, {}
    types: dict[int, bytes] = {}
    shapes: dict[int, tuple[str, bytes, bytes]] = {}
    for i, code in zip(rows.tolist(), names.codes[rows].tolist(), strict=True):
        a = args[i]
        if not (len(a.input_type) or len(a.input_dims)):  # not recorded (record_shapes off)
            continue
        name = names.values[code]
        if name in DTYPE_OPS and len(a.input_type):
            types[int(ext_id[i])] = bytes(a.input_type)
        if name in _SHAPED_OPS and len(a.input_dims):
            shapes[int(ext_id[i])] = (name, bytes(a.input_dims), bytes(a.input_type))
    return types, shapes
