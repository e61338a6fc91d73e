"""The snapshot's shape, checked field by field before any analysis reads it.

Both readers hand their objects through here, so a field of the wrong type is the same one-line
error whichever reader ran, and nothing downstream meets a value it does not expect: byte counts
are ``int`` in ``[0, MAX_BYTES)``, addresses ``int`` in ``[0, 2**64)``, names ``str``.

A pickle can reference one object many times: one segment listed 30,000 times costs 30,000
two-byte references in the file and 30,000 times the segment's blocks in work. torch never
shares a segment, a block or a trace entry, so a second reference to one is refused; frames
lists (which torch does share) are classified once per list. The work after reading is then
linear in the file's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchdoctor.memory.errors import SnapshotError

MAX_BYTES = 1 << 50
"""A byte count at or above 1 PiB is not one device's memory."""
_SEGMENT_SIZES = ("total_size", "allocated_size", "active_size", "requested_size")
_BLOCK_STATES = frozenset({"active_allocated", "active_pending_free", "inactive"})


class HolderId(int):
    """A frames list already classified (the streaming reader swaps lists for these); a plain
    ``int`` from the file is never taken for one."""


class _Handed:
    """What the streaming reader leaves where a trace entry it handed over was referenced."""

    __slots__ = ()


HANDED = _Handed()
_ALREADY = (
    "an object the file already listed (torch never shares one; a file that does can "
    "multiply the work without bound)"
)


def byte_count(value: Any, where: str) -> int:
    """``value`` if it is an int byte count, else a SnapshotError naming ``where``."""
    if type(value) is int and 0 <= value < MAX_BYTES:
        return value
    raise SnapshotError(f"not a memory snapshot: {where} is {_bad_number(value)}, not a byte count")


def address(value: Any, where: str) -> int:
    if type(value) is int and 0 <= value < 1 << 64:
        return value
    raise SnapshotError(f"not a memory snapshot: {where} is {_bad_number(value)}, not an address")


def time_us(value: Any, where: str) -> int:
    if type(value) is int and -(1 << 63) <= value < 1 << 63:
        return value
    raise SnapshotError(f"not a memory snapshot: {where} is {_bad_number(value)}, not a time")


def _what(value: Any) -> str:
    """A value described without ``repr`` (which a deep or huge value would make costly)."""
    if value is HANDED or (type(value) is dict and "action" in value):
        return "a trace entry"
    if type(value) is HolderId:
        return "a list"  # it stands for a frames list
    if value is None:
        return "missing"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _bad_number(value: Any) -> str:
    if type(value) is int:
        return "negative" if value < 0 else "out of range"
    return _what(value)


@dataclass(frozen=True)
class Block:
    address: int
    size: int
    state: str
    frames: Any


@dataclass(frozen=True)
class Segment:
    """One segment with checked fields (sizes in bytes)."""

    device: int
    total_size: int
    allocated_size: int
    active_size: int
    requested_size: int
    segment_type: str
    is_expandable: bool
    blocks: tuple[Block, ...]


def segments(raw: Any) -> list[Segment]:
    """The ``segments`` list, every field checked; a shared segment or block is refused."""
    if not isinstance(raw, list):
        raise SnapshotError("not a memory snapshot: no 'segments' list")
    seen: set[int] = set()
    out = []
    for i, seg in enumerate(raw):
        if type(seg) is not dict or "action" in seg:
            raise SnapshotError(f"not a memory snapshot: segment {i} is {_what(seg)}, not a dict")
        _once(seen, seg, f"segment {i}")
        out.append(_segment(i, seg, seen))
    return out


def _once(seen: set[int], obj: Any, where: str) -> None:
    if id(obj) in seen:
        raise SnapshotError(f"not a memory snapshot: {where} is {_ALREADY}")
    seen.add(id(obj))


def _segment(i: int, seg: dict[str, Any], seen: set[int]) -> Segment:
    where = f"segment {i}"
    device = seg.get("device", 0)
    if type(device) is not int or not 0 <= device < 1 << 15:
        raise SnapshotError(f"not a memory snapshot: {where}'s device is {_what(device)}")
    sizes = [byte_count(seg.get(k, 0), f"{where}'s {k}") for k in _SEGMENT_SIZES]
    if max(sizes[1], sizes[2]) > sizes[0]:
        raise SnapshotError(
            f"not a memory snapshot: {where} has more bytes allocated than it holds"
        )
    kind = seg.get("segment_type", "large")
    blocks = seg.get("blocks", [])
    if not isinstance(blocks, list):
        raise SnapshotError(f"not a memory snapshot: {where}'s blocks are {_what(blocks)}")
    checked = []
    for j, b in enumerate(blocks):
        bw = f"block {j} of {where}"
        if type(b) is not dict or "action" in b:
            raise SnapshotError(f"not a memory snapshot: {bw} is {_what(b)}, not a dict")
        _once(seen, b, bw)
        state = b.get("state", "")
        checked.append(
            Block(
                address(b.get("address", 0), f"{bw}'s address"),
                byte_count(b.get("size", 0), f"{bw}'s size"),
                state if type(state) is str and state in _BLOCK_STATES else "unknown",
                b.get("frames"),
            )
        )
    total, allocated, active, requested = sizes
    return Segment(
        device,
        total,
        allocated,
        active,
        requested,
        kind if type(kind) is str else "large",
        seg.get("is_expandable") is True,
        tuple(checked),
    )


Entry = tuple[str, int, int, int, int, Any]
"""(action, addr, size, time_us, device_free, frames) of one history entry, checked."""
_ADDR_END = 1 << 64
_TIME_LO, _TIME_HI = -(1 << 63), 1 << 63


def entry(raw: Any, device: int, index: int) -> Entry:
    """A ``device_traces`` entry, every field the replay reads checked (a tuple, see ``Entry``:
    this runs once per history entry, millions of times for a large snapshot)."""
    if type(raw) is dict:
        action, addr = raw.get("action"), raw.get("addr", 0)
        size, t = raw.get("size", 0), raw.get("time_us", 0)
        if (
            type(action) is str
            and action != "oom"
            and type(addr) is int
            and 0 <= addr < _ADDR_END
            and type(size) is int
            and 0 <= size < MAX_BYTES
            and type(t) is int
            and _TIME_LO <= t < _TIME_HI
        ):
            return action, addr, size, t, 0, raw.get("frames")
    return _entry_checked(raw, device, index)


def _entry_checked(raw: Any, device: int, index: int) -> Entry:
    """``entry`` the slow way: an OOM entry, or a field that is wrong (named in the error)."""
    where = f"trace entry {index} of device {device}"
    if raw is HANDED:
        raise SnapshotError(f"not a memory snapshot: {where} is {_ALREADY}")
    if type(raw) is not dict:
        raise SnapshotError(f"not a memory snapshot: {where} is {_what(raw)}, not a dict")
    action = raw.get("action")
    if type(action) is not str:
        raise SnapshotError(f"not a memory snapshot: {where} has no action")
    addr = address(raw.get("addr", 0), f"{where}'s addr")
    size = byte_count(raw.get("size", 0), f"{where}'s size")
    t = time_us(raw.get("time_us", 0), f"{where}'s time")
    free = 0
    if action == "oom":  # older versions put the device's free bytes in addr
        free = byte_count(raw.get("device_free", addr), f"{where}'s device_free")
    return action, addr, size, t, free, raw.get("frames")
