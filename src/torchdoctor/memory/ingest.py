"""Turn a snapshot file into per-device replays and checked segment data, by either reader.

Files up to ``WHOLE_FILE_LIMIT_BYTES`` are read whole (every object kept, then walked); larger
ones go through the streaming reader so memory stays bounded. Both are one restricted pickle
machine and feed the same sink through the same checks, so the analysis cannot depend on which
reader ran (a test runs both on every case).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchdoctor.memory import shape
from torchdoctor.memory.errors import SnapshotError
from torchdoctor.memory.frames import Holder, classify
from torchdoctor.memory.replay import DeviceReplay
from torchdoctor.memory.shape import HolderId, Segment
from torchdoctor.memory.stream import StreamingReader, memo_refs

WHOLE_FILE_LIMIT_BYTES = 64 << 20  # above this, keeping every object costs several times the file


@dataclass
class HolderTable:
    """Interned holders: each distinct (label, category) gets a small integer id."""

    holders: list[Holder] = field(default_factory=list)
    _ids: dict[Holder, int] = field(default_factory=dict)
    _by_list: dict[int, tuple[Any, int]] = field(default_factory=dict)
    _by_frames: dict[tuple[int, ...], int] = field(default_factory=dict)
    _by_ops: dict[bytes, int] = field(default_factory=dict)
    _unsettled: list[int] = field(default_factory=list)
    _id_objects: list[HolderId] = field(default_factory=list)

    def intern(self, holder: Holder) -> int:
        found = self._ids.get(holder)
        if found is None:
            found = self._ids[holder] = len(self.holders)
            self.holders.append(holder)
            self._id_objects.append(HolderId(found))
        return found

    def holder_id(self, holder: int) -> HolderId:
        """The one ``HolderId`` object of a holder (the memo holds millions of references to a
        few holders: one object each, not one per reference)."""
        return self._id_objects[holder]

    def of_frames(self, frames: Any) -> int:
        """Holder id of a frames list; a ``HolderId`` is one the streaming reader swapped in."""
        if type(frames) is HolderId:
            return frames
        if not isinstance(frames, list):
            return self.intern(classify([]))
        cached = self._by_list.get(id(frames))
        if cached is None:
            # keep the list alive with its id, so the id cannot be reused while cached
            cached = self._by_list[id(frames)] = (frames, self._classified(frames))
        return cached[1]

    def _classified(self, frames: list[Any]) -> int:
        # frame dicts are shared between stacks and live as long as the file's objects do
        key = tuple(map(id, frames))
        found = self._by_frames.get(key)
        if found is None:
            found = self._by_frames[key] = self.intern(classify(frames))
        return found

    def of_ops(self, ops: bytes, memo: list[Any]) -> int:
        """Holder id of a frames list given as its memo-reference opcodes (streaming reader)."""
        found = self._by_ops.get(ops)
        if found is None:
            found = self._by_ops[ops] = self.intern(classify(memo_refs(ops, memo)))
        return self.holder_id(found)

    def sweep(self, memo: list[Any], start: int) -> None:
        """Swap frames lists already classified for their holder id and forget them.

        A frames list whose entry is still in an open batch is not classified yet: its slot is
        retried at the next sweep (so are the few lists of segment blocks, which never are).
        """
        by_list, waiting = self._by_list, []
        for i in [*self._unsettled, *range(start, len(memo))]:
            value = memo[i]
            if type(value) is not list:
                continue
            found = by_list.pop(id(value), None)
            if found is not None:
                memo[i] = self.holder_id(found[1])
            elif value and type(value[0]) is dict and "filename" in value[0]:
                waiting.append(i)
        self._unsettled = waiting
        by_list.clear()


@dataclass
class Ingested:
    """What the analysis needs: the top-level data without trace entries, the checked segments,
    and one replay per device."""

    top: dict[str, Any]
    replays: dict[int, DeviceReplay]
    holders: HolderTable
    streamed: bool
    segments: list[Segment] = field(default_factory=list)


class _Sink:
    def __init__(self) -> None:
        self.holders = HolderTable()
        self.replays: dict[Any, DeviceReplay] = {}

    def event(self, key: Any, raw: Any, device: int | None = None) -> None:
        """Feed one trace entry of the list ``key`` (its device, where already known)."""
        replay = self.replays.get(key)
        if replay is None:
            replay = self.replays[key] = DeviceReplay()
        dev = len(self.replays) - 1 if device is None else device
        action, addr, size, time_us, free, frames = shape.entry(raw, dev, replay.entries)
        if action == "oom":
            replay.oom(size, free, time_us)
        # every entry's stack is looked up (cached), so its frames list can be let go at the next sweep
        replay.feed(action, addr, size, time_us, self.holders.of_frames(frames))


def _check_shape(path: Path, top: Any) -> dict[str, Any]:
    if not isinstance(top, dict):
        kind = type(top).__name__
        hint = (
            " (a list of segments from torch.cuda.memory_snapshot(); dump with torch.cuda.memory._dump_snapshot() instead)"
            if kind == "list"
            else ""
        )
        raise SnapshotError(
            f"{path}: not a memory snapshot: the pickle holds a {kind}, not a dict{hint}"
        )
    if not isinstance(top.get("segments"), list):
        keys = sorted(k for k in top if isinstance(k, str))[:6]
        raise SnapshotError(f"{path}: not a memory snapshot: no 'segments' list (keys: {keys})")
    traces = top.get("device_traces", [])
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError(
            f"{path}: not a memory snapshot: 'device_traces' is not a list of lists"
        )
    return top


def _prefixed(path: Path, exc: SnapshotError) -> SnapshotError:
    text = str(exc)
    return exc if text.startswith(f"{path}:") else SnapshotError(f"{path}: {text}")


def ingest(path: Path, *, stream: bool | None = None) -> Ingested:
    """Read ``path`` with one of the two readers (``stream=None``: chosen by file size).

    Both run the same restricted pickle machine (``memory/stream.py``): the streaming reader
    hands each history entry over as soon as it is read and keeps none; the whole-file reader
    keeps every object and walks the history afterwards. Both check every field through
    ``memory/shape.py``, so they reach the same verdict on any file.
    """
    from torchdoctor.inputs import input_path

    if path.is_dir():
        raise SnapshotError(f"{path}: is a folder; give the snapshot file (a .pickle)")
    input_path(path, "file")  # a FIFO or a device would block or never end
    if stream is None:
        stream = path.stat().st_size > WHOLE_FILE_LIMIT_BYTES
    sink = _Sink()
    try:
        top, replays = (_streamed if stream else _whole)(path, sink)
        segments = shape.segments(top["segments"])
    except SnapshotError as exc:
        raise _prefixed(path, exc) from None
    for replay in replays.values():
        replay.finish()
    return Ingested(top, replays, sink.holders, stream, segments)


def _streamed(path: Path, sink: _Sink) -> tuple[dict[str, Any], dict[int, DeviceReplay]]:
    reader = StreamingReader(sink.event, sink.holders.sweep, sink.holders.of_ops)
    with path.open("rb") as handle:
        top = _check_shape(path, reader.run(handle, path))
    devices = reader.trace_devices()
    # A trace list the reader did not hand over (it was not built where torch builds it) is
    # walked now, as the whole-file reader walks every list.
    kept: dict[Any, int] = {}
    for i, entries in enumerate(top.get("device_traces", [])):
        if id(entries) not in devices:
            kept[("kept", i)] = i
            for raw in entries:
                sink.event(("kept", i), raw, i)
    # Entries handed over from a list outside the top-level device_traces belong to no
    # device (the other reader never reads them either).
    where = {**devices, **kept}
    replays = {where[k]: r for k, r in sink.replays.items() if k in where}
    return {k: v for k, v in top.items() if k != "device_traces"}, replays


def _whole(path: Path, sink: _Sink) -> tuple[dict[str, Any], dict[int, DeviceReplay]]:
    with path.open("rb") as handle:
        top = _check_shape(path, StreamingReader().run(handle, path))
    seen: set[int] = set()
    lists: dict[int, int] = {}
    for device, entries in enumerate(top.get("device_traces", [])):
        if entries and id(entries) in lists:
            raise SnapshotError(
                f"not a memory snapshot: device {device}'s trace is the list of device "
                f"{lists[id(entries)]} (torch never shares one)"
            )
        lists[id(entries)] = device
        for raw in entries:
            if id(raw) in seen and type(raw) is dict:
                raw = shape.HANDED  # listed twice: refused as the streaming reader refuses it
            seen.add(id(raw))
            sink.event(device, raw, device)
    return {k: v for k, v in top.items() if k != "device_traces"}, dict(sink.replays)
