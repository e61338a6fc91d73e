"""Write snapshot pickles the way ``pickle.dump`` (protocol 4) does, one object at a time.

Used to build test files and the 1 GB benchmark file without holding the whole history in memory:
strings and shared containers are memoized and referenced like the real pickler does; each trace
entry and its frames list are fresh objects (a new list of shared frame dicts, as torch writes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import IO, Any

BATCH = 1000  # the pickler writes list items in batches of 1000


class SnapshotWriter:
    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.memo: dict[Any, int] = {}  # str value or id(container) -> memo index
        self.keep: list[Any] = []  # shared containers stay alive so their ids stay unique
        self.count = 0
        self.time_offsets: list[int] | None = None  # where each time_us value starts, when recorded

    def _memoize(self, key: Any) -> None:
        self.out.write(b"\x94")
        if key is not None:
            self.memo[key] = self.count
        self.count += 1

    def _ref(self, idx: int) -> None:
        self.out.write(b"h" + bytes([idx]) if idx < 256 else b"j" + struct.pack("<I", idx))

    def value(self, obj: Any, *, share: bool = True) -> None:
        w = self.out.write
        key: Any = obj if isinstance(obj, str) else id(obj)
        if (
            isinstance(obj, str) or (share and isinstance(obj, (dict, list, tuple)))
        ) and key in self.memo:
            self._ref(self.memo[key])
            return
        if obj is None:
            w(b"N")
        elif obj is True or obj is False:
            w(b"\x88" if obj else b"\x89")
        elif isinstance(obj, int):
            self._int(obj)
        elif isinstance(obj, float):
            w(b"G" + struct.pack(">d", obj))
        elif isinstance(obj, str):
            raw = obj.encode("utf-8", "surrogatepass")
            w(
                b"\x8c" + bytes([len(raw)]) + raw
                if len(raw) < 256
                else b"X" + struct.pack("<I", len(raw)) + raw
            )
            self._memoize(obj)
        elif isinstance(obj, tuple):
            for item in obj:
                self.value(item)
            w({0: b")", 1: b"\x85", 2: b"\x86", 3: b"\x87"}[len(obj)])
            self._shared(obj, share)
        elif isinstance(obj, list):
            w(b"]")
            self._shared(obj, share)
            self.items(obj)
        elif isinstance(obj, dict):
            w(b"}")
            self._shared(obj, share)
            self._dict_items(obj)
        else:
            raise TypeError(type(obj))

    def _shared(self, obj: Any, share: bool) -> None:
        if share:
            self.keep.append(obj)
            self._memoize(id(obj))
        else:
            self._memoize(None)

    def _int(self, n: int) -> None:
        if 0 <= n < 256:
            self.out.write(b"K" + bytes([n]))
        elif 0 <= n < 65536:
            self.out.write(b"M" + struct.pack("<H", n))
        elif -(2**31) <= n < 2**31:
            self.out.write(b"J" + struct.pack("<i", n))
        else:
            raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
            self.out.write(b"\x8a" + bytes([len(raw)]) + raw)

    def items(self, items: Iterable[Any], *, share: bool = True) -> None:
        batch: list[Any] = []
        for item in items:
            batch.append(item)
            if len(batch) == BATCH:
                self._batch(batch, share)
                batch = []
        if batch:
            self._batch(batch, share)

    def _batch(self, batch: list[Any], share: bool) -> None:
        if len(batch) == 1:
            self.value(batch[0], share=share)
            self.out.write(b"a")
            return
        self.out.write(b"(")
        for item in batch:
            self.value(item, share=share)
        self.out.write(b"e")

    def _dict_items(self, d: dict[str, Any]) -> None:
        if not d:
            return
        self.out.write(b"(")
        for k, v in d.items():
            self.value(k)
            if k == "time_us" and self.time_offsets is not None:
                self.time_offsets.append(self.out.tell())
            if k == "frames" and isinstance(v, list):
                self.out.write(b"]")  # a fresh list of shared frames
                self._memoize(None)
                self.items(v)
            else:
                self.value(v)
        self.out.write(b"u")


def write_snapshot(
    out: IO[bytes], top: dict[str, Any], traces: Iterable[Iterable[dict[str, Any]]]
) -> None:
    """Write ``top`` with ``device_traces`` taken from ``traces`` (one iterable per device)."""
    w = SnapshotWriter(out)
    out.write(b"\x80\x04}")
    w._memoize(None)
    out.write(b"(")
    for key, value in top.items():
        if key == "device_traces":
            continue
        w.value(key)
        w.value(value)
    w.value("device_traces")
    out.write(b"]")
    w._memoize(None)
    out.write(b"(")
    for entries in traces:
        out.write(b"]")
        w._memoize(None)
        w.items(entries, share=False)
    out.write(b"e")
    out.write(b"u.")


def repeated(entries: list[dict[str, Any]], times: int) -> Iterator[dict[str, Any]]:
    """The history ``times`` over, each copy later by the history's span (fresh entry dicts)."""
    if not entries:
        return
    span = entries[-1].get("time_us", 0) - entries[0].get("time_us", 0) + 1
    for k in range(times):
        for e in entries:
            yield {**e, "time_us": e.get("time_us", 0) + k * span}
