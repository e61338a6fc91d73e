"""Turn a snapshot file into per-device replays and plain segment data, by either reader.

Files up to ``WHOLE_FILE_LIMIT_BYTES`` are unpickled at once by the restricted C unpickler (fast);
larger ones go through the streaming reader so memory stays bounded. Both feed the same sink, so
the analysis cannot depend on which reader ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchdoctor.memory.errors import SnapshotError
from torchdoctor.memory.frames import Holder, classify
from torchdoctor.memory.replay import DeviceReplay
from torchdoctor.memory.safe_pickle import load_restricted
from torchdoctor.memory.stream import StreamingReader, memo_refs

WHOLE_FILE_LIMIT_BYTES = 64 << 20  # above this, pickle.load's objects cost several times the file


@dataclass
class HolderTable:
    """Interned holders: each distinct (label, category) gets a small integer id."""

    holders: list[Holder] = field(default_factory=list)
    _ids: dict[Holder, int] = field(default_factory=dict)
    _by_list: dict[int, tuple[Any, int]] = field(default_factory=dict)
    _by_frames: dict[tuple[int, ...], int] = field(default_factory=dict)
    _by_ops: dict[bytes, int] = field(default_factory=dict)
    _unsettled: list[int] = field(default_factory=list)

    def intern(self, holder: Holder) -> int:
        found = self._ids.get(holder)
        if found is None:
            found = self._ids[holder] = len(self.holders)
            self.holders.append(holder)
        return found

    def of_frames(self, frames: Any) -> int:
        """Holder id of a frames list; an int is an id that the streaming reader already swapped in."""
        if type(frames) is int:
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
        return found

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
                memo[i] = found[1]
            elif value and type(value[0]) is dict and "filename" in value[0]:
                waiting.append(i)
        self._unsettled = waiting
        by_list.clear()


@dataclass
class Ingested:
    """What the analysis needs: the top-level data without trace entries, and one replay per device."""

    top: dict[str, Any]
    replays: dict[int, DeviceReplay]
    holders: HolderTable
    streamed: bool


class _Sink:
    def __init__(self) -> None:
        self.holders = HolderTable()
        self.replays: dict[int, DeviceReplay] = {}

    def event(self, key: int, entry: dict[str, Any]) -> None:
        replay = self.replays.get(key)
        if replay is None:
            replay = self.replays[key] = DeviceReplay()
        try:
            action = entry["action"]
            size = int(entry.get("size", 0))
            time_us = int(entry.get("time_us", 0))
            addr = int(entry.get("addr", 0))
        except (KeyError, TypeError, ValueError):
            raise SnapshotError(
                f"not a memory snapshot: malformed trace entry {entry!r:.120}"
            ) from None
        if action == "oom":
            replay.oom(size, int(entry.get("device_free", addr)), time_us)
        # every entry's stack is looked up (cached), so its frames list can be let go at the next sweep
        holder = self.holders.of_frames(entry.get("frames"))
        replay.feed(action, addr, size, time_us, holder)


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
        raise SnapshotError(
            f"{path}: not a memory snapshot: no 'segments' list (keys: {sorted(map(str, top))[:6]})"
        )
    traces = top.get("device_traces", [])
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError(
            f"{path}: not a memory snapshot: 'device_traces' is not a list of lists"
        )
    return top


def ingest(path: Path, *, stream: bool | None = None) -> Ingested:
    """Read ``path`` with the restricted reader (``stream=None``: chosen by file size)."""
    if path.is_dir():
        raise SnapshotError(f"{path}: is a folder; give the snapshot file (a .pickle)")
    if not path.is_file():
        raise SnapshotError(f"{path}: no such file")
    if stream is None:
        stream = path.stat().st_size > WHOLE_FILE_LIMIT_BYTES
    sink = _Sink()
    if stream:
        reader = StreamingReader(sink.event, sink.holders.sweep, sink.holders.of_ops)
        with path.open("rb") as handle:
            top = _check_shape(path, reader.run(handle, path))
        devices = reader.trace_devices()
        replays = {devices.get(k, i): r for i, (k, r) in enumerate(sink.replays.items())}
    else:
        top = _check_shape(path, load_restricted(path))
        for device, entries in enumerate(top.get("device_traces", [])):
            for entry in entries:
                if not isinstance(entry, dict):
                    raise SnapshotError(
                        f"{path}: not a memory snapshot: a trace entry is a {type(entry).__name__}"
                    )
                sink.event(device, entry)
        replays = sink.replays
        top = {k: v for k, v in top.items() if k != "device_traces"}
    for replay in replays.values():
        replay.finish()
    return Ingested(top, replays, sink.holders, stream)
