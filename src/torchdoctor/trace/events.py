"""The raw shape of a Kineto (Chrome trace) event, as msgspec structs.

Only the fields an analysis reads are declared; msgspec skips the rest without building objects for
them, which is most of why loading is fast. Types are loose unions on purpose: a trace with an odd
value in one event must not fail as a whole (the strict path falls back to a lenient one).

No ``from __future__ import annotations`` here: msgspec reads the structs' field types, and
as strings it compiled and evaluated each of the 22 at every start-up.
"""

import re
from typing import Any, Union

import msgspec

Num = int | float
Id = int | str


class Args(msgspec.Struct, gc=False, frozen=True):
    """The ``args`` fields torchdoctor reads of a complete event (Kineto spells some keys with
    spaces and capitals).

    Missing numbers default to -1 so columns build without a None check per event.
    """

    correlation: Num | str = -1
    external_id: Num | str = msgspec.field(default=-1, name="External id")
    device: Num | str = -1
    stream: Num | str = -1
    bytes: Num | str = -1
    # record_shapes=True: kept raw, decoded only for the few ops that need a dtype
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    # and the shapes, decoded only for the GEMM/attention ops whose bytes moved are estimated
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")


class MemoryArgs(msgspec.Struct, gc=False, frozen=True):
    """The ``args`` of a ``[memory]`` instant event (profile_memory=True).

    A struct of its own: the fields of both kinds in one would make every complete event's
    decode slower (about 10%), and neither kind has the other's keys.
    """

    total_allocated: Num | str = msgspec.field(default=-1, name="Total Allocated")
    total_reserved: Num | str = msgspec.field(default=-1, name="Total Reserved")
    device_id: Num | str = msgspec.field(default=-1, name="Device Id")
    device_type: Num | str = msgspec.field(default=-1, name="Device Type")
    alloc_bytes: Num | str = msgspec.field(default=-1, name="Bytes")


NO_ARGS = Args()
NO_MEMORY_ARGS = MemoryArgs()


class Event(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """A complete event (Chrome trace phase ``ph: "X"``): a span on a thread or a GPU stream."""

    cat: str | None = None
    name: Any = ""
    pid: Id | None = None
    tid: Id | None = None
    ts: Num | None = None
    dur: Num = 0
    args: Args = NO_ARGS


class Instant(msgspec.Struct, gc=False, tag_field="ph", tag="i"):
    """An instant event (``ph: "i"``); ``[memory]`` events from profile_memory are these."""

    name: Any = ""
    ts: Num | None = None
    args: MemoryArgs = NO_MEMORY_ARGS


# Every other phase of the Chrome trace format decodes to an empty struct: msgspec then skips its
# fields without building them (Kineto's flow arrows alone are a third of a trace's events). A
# phase not listed here sends its chunk down the lenient path, which is slower but reads it.
_OTHER_PHASES = "BEIbnesStTpFfPNODMVvRcC()"
_SKIPPED = tuple(
    msgspec.defstruct(f"Phase{ord(ph)}", [], tag_field="ph", tag=ph, gc=False)
    for ph in _OTHER_PHASES
)
_ANY_PHASE: Any = Union[(Event, Instant, *_SKIPPED)]
STRICT_EVENTS = msgspec.json.Decoder(list[_ANY_PHASE])
ANY_JSON = msgspec.json.Decoder()


class BadChunk(msgspec.Struct, frozen=True):
    """Why a chunk of the events array did not decode.

    ``truncated`` is msgspec's "input data was truncated": the chunk ended inside a string or a
    nested value, which is what a cut at a false event boundary looks like (joining the chunk with
    the next one fixes it). ``trailing_at`` is where msgspec saw "trailing characters": the
    array closed early, at the events array's true end. Any other syntax error is a defect of
    the file.
    """

    truncated: bool
    message: str
    trailing_at: int = -1


TOO_DEEP = BadChunk(False, "the JSON nests too deeply (hundreds of levels)")
"""msgspec stops at Python's recursion limit; real events nest a few levels."""
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")


def _bad_chunk(exc: msgspec.DecodeError) -> BadChunk:
    msg = str(exc)
    m = _TRAILING.search(msg)
    return BadChunk("truncated" in msg, msg, int(m.group(1)) if m else -1)


def decode_events(data: bytes | bytearray | memoryview) -> tuple[list[Any], int] | BadChunk:
    """Decode a JSON array of events: the events and how many items were skipped as malformed.

    Complete events come back as ``Event``, instants as ``Instant``, other phases as empty
    structs of other types.

    Typed (fast) decode first; if some event has an odd field type, an untyped decode and a
    per-event coercion (slow, rare). A syntax error comes back as ``BadChunk``, never raised.
    """
    try:
        return STRICT_EVENTS.decode(data), 0
    except msgspec.ValidationError:
        pass  # valid JSON with an odd field somewhere: take the slow, lenient path
    except msgspec.DecodeError as exc:
        return _bad_chunk(exc)
    except RecursionError:
        return TOO_DEEP
    try:  # the typed decode stops at the first odd field, before it has seen all the syntax
        items = ANY_JSON.decode(data)
    except msgspec.DecodeError as exc:
        return _bad_chunk(exc)
    except RecursionError:
        return TOO_DEEP
    if not isinstance(items, list):  # pragma: no cover - the typed decode saw an array
        return [], 1
    out = [ev for ev in map(coerce_event, items) if ev is not None]
    return [ev for ev in out if ev is not _OTHER], len(items) - len(out)


_OTHER = Event()  # what coerce_event returns for a valid event of another phase


def coerce_event(obj: object) -> Event | Instant | None:
    """Turn one untyped JSON value into an Event or Instant, or None if it is not an object.

    Events of other phases come back as the ``_OTHER`` placeholder. Used only on the slow
    path, when the typed decoder rejected a chunk.
    """
    if not isinstance(obj, dict):
        return None
    ph = obj.get("ph")
    args = obj.get("args")
    if ph == "i":
        mem = _coerce_args(args, _MEMORY_KEYS) if isinstance(args, dict) else {}
        return Instant(name=obj.get("name", ""), ts=_opt_num(obj.get("ts")), args=MemoryArgs(**mem))
    if ph != "X":
        return _OTHER
    ev = Event(cat=_opt_str(obj.get("cat")), name=obj.get("name", ""))
    ev.pid = _opt_id(obj.get("pid"))
    ev.tid = _opt_id(obj.get("tid"))
    ev.ts = _opt_num(obj.get("ts"))
    ev.dur = _opt_num(obj.get("dur")) or 0.0
    if isinstance(args, dict):
        kw: dict[str, Any] = _coerce_args(args, _EVENT_KEYS)
        for attr, key in (("input_type", "Input type"), ("input_dims", "Input Dims")):
            raw = args.get(key)
            if raw is not None:
                kw[attr] = msgspec.Raw(msgspec.json.encode(raw))
        ev.args = Args(**kw)
    return ev


_EVENT_KEYS = (
    ("correlation", "correlation"),
    ("external_id", "External id"),
    ("device", "device"),
    ("stream", "stream"),
    ("bytes", "bytes"),
)
_MEMORY_KEYS = (
    ("total_allocated", "Total Allocated"),
    ("total_reserved", "Total Reserved"),
    ("device_id", "Device Id"),
    ("device_type", "Device Type"),
    ("alloc_bytes", "Bytes"),
)


def _coerce_args(d: dict[str, Any], keys: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """The fields among ``keys`` (attribute, JSON key) whose values are numbers or strings."""
    kw: dict[str, Any] = {}
    for attr, key in keys:
        v = d.get(key)
        if isinstance(v, int | float | str) and not isinstance(v, bool):
            kw[attr] = v
    return kw


def _opt_str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _opt_id(v: object) -> int | str | None:
    if isinstance(v, bool):
        return None
    return v if isinstance(v, int | str) else None


def _opt_num(v: object) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        try:
            return float(v)
        except OverflowError:  # an integer beyond a double: not a usable time
            return float("inf")
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None
