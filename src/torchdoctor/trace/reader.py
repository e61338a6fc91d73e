"""Stream the events of a Kineto trace file in chunks, without holding the whole JSON in memory.

A trace is ``{"schemaVersion": ..., "traceEvents": [ {...}, {...}, ... ], "traceName": ...}`` (or a
bare array of events). The reader finds the ``traceEvents`` array, cuts it at event boundaries
(``}`` then ``,`` then ``{``) into chunks of a few MiB, and decodes each chunk with msgspec. A cut
that falls inside a string or a nested object makes that chunk invalid JSON; the reader then tries
the previous boundary, so correctness never depends on how the file is laid out. Peak memory is the
chunk size plus the columns built from it, not the file size.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec

from torchdoctor.errors import TraceError
from torchdoctor.trace.events import ANY_JSON, STRICT_EVENTS, Event, coerce_event

CHUNK_BYTES = 8 << 20
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_WS = b" \t\r\n"
_KEY = b'"traceEvents"'


@dataclass
class ReadStats:
    """What the reader saw besides the events (filled in while streaming)."""

    top_level: dict[str, Any] = field(default_factory=dict)
    """Every top-level key except traceEvents (deviceProperties, distributedInfo, ...)."""
    malformed_events: int = 0
    """Array items that were not event objects or had unusable field types (skipped)."""
    bytes_read: int = 0
    """Decompressed JSON bytes read."""


def open_trace(path: Path) -> IO[bytes]:
    """Open a trace for binary reading, decompressing gzip by its magic bytes (not its name)."""
    try:
        fh: IO[bytes] = open(path, "rb")  # noqa: SIM115 - returned to the caller
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror}") from None
    magic = fh.read(2)
    fh.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb")
    return fh


def iter_event_chunks(path: Path, stats: ReadStats) -> Iterator[list[Event]]:
    """Yield the trace's events as lists of ``Event``, a chunk at a time.

    Raises TraceError (one line) on anything that is not a readable trace.
    """
    with open_trace(path) as fh:
        read = _make_reader(fh, path, stats)
        buf, is_array = _seek_events(read, path, stats)
        yield from _stream_array(read, buf, is_array, path, stats)


def _make_reader(fh: IO[bytes], path: Path, stats: ReadStats) -> Callable[[], bytes]:
    def read() -> bytes:
        try:
            data = fh.read(CHUNK_BYTES)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise TraceError(f"{path}: corrupt or truncated gzip ({exc})") from None
        except OSError as exc:
            raise TraceError(f"{path}: cannot read: {exc}") from None
        stats.bytes_read += len(data)
        return data

    return read


def _seek_events(read: Callable[[], bytes], path: Path, stats: ReadStats) -> tuple[bytes, bool]:
    """Consume the file up to the first byte inside the events array; return (rest, bare_array)."""
    buf = read()
    if buf.startswith(b"\xef\xbb\xbf"):
        buf = buf[3:]
    buf = buf.lstrip(_WS)
    while not buf:
        more = read()
        if not more:
            raise TraceError(f"{path}: empty file")
        buf = more.lstrip(_WS)
    if buf[:1] == b"[":
        return buf[1:], True
    if buf[:1] != b"{":
        raise TraceError(f"{path}: not a JSON trace (starts with {buf[:12]!r})")
    start = 0
    while True:
        idx = buf.find(_KEY, start)
        if idx < 0:
            more = read()
            if not more:
                _no_events(buf, path)
            start = max(0, len(buf) - len(_KEY))
            buf += more
            continue
        head = _parse_object_part(buf[1:idx])
        if head is None:  # the key text appeared inside a value: keep looking
            start = idx + 1
            continue
        rest = buf[idx + len(_KEY) :].lstrip(_WS)
        while len(rest) < 2:
            more = read()
            if not more:
                raise TraceError(f"{path}: truncated JSON after traceEvents")
            rest = (rest + more).lstrip(_WS)
        if rest[:1] != b":" or rest[1:].lstrip(_WS)[:1] != b"[":
            raise TraceError(f"{path}: traceEvents is not an array")
        stats.top_level.update(head)
        return rest[1:].lstrip(_WS)[1:], False


def _no_events(buf: bytes, path: Path) -> None:
    try:
        ANY_JSON.decode(buf)
    except msgspec.DecodeError:
        raise TraceError(f"{path}: truncated or invalid JSON (no traceEvents found)") from None
    raise TraceError(f"{path}: no traceEvents in this JSON: not a torch.profiler trace")


def _parse_object_part(body: bytes) -> dict[str, Any] | None:
    """Decode ``"k": v, "k2": v2`` (with stray commas stripped) as a dict, or None if invalid."""
    body = body.strip(_WS).strip(b",").strip(_WS)
    if not body:
        return {}
    try:
        value = ANY_JSON.decode(b"{" + body + b"}")
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


def _stream_array(
    read: Callable[[], bytes], buf: bytes, is_array: bool, path: Path, stats: ReadStats
) -> Iterator[list[Event]]:
    """Cut the events array at event boundaries and decode chunk by chunk."""
    while True:
        more = read()
        if not more:
            break
        buf += more
        cut = _decode_prefix(buf, stats)
        if cut is not None:
            events, end = cut
            buf = buf[end:].lstrip(_WS).lstrip(b",")
            yield events
    yield _decode_tail(buf, is_array, path, stats)


def _decode_prefix(buf: bytes, stats: ReadStats) -> tuple[list[Event], int] | None:
    """Decode all complete events before the last boundary; return them and where they end."""
    window = max(0, len(buf) - (1 << 20))
    while True:
        ends = [m.start() + 1 for m in _BOUNDARY.finditer(buf, window)]
        for end in reversed(ends):
            events = _decode_events(buf[:end], stats)
            if events is not None:
                return events, end
        if window == 0:
            return None  # one event bigger than the buffer so far: read more
        window = max(0, window - (8 << 20))


def _decode_tail(buf: bytes, is_array: bool, path: Path, stats: ReadStats) -> list[Event]:
    """Decode the last events and the top-level keys after the array."""
    stripped = buf.rstrip(_WS)
    if is_array and not stripped.endswith(b"]"):
        # The Chrome trace format allows a bare array to lose its closing bracket.
        events = _decode_events(stripped.rstrip(b","), stats)
        if events is not None:
            return events
    pos = len(stripped)
    while True:
        pos = stripped.rfind(b"]", 0, pos)
        if pos < 0:
            raise TraceError(f"{path}: truncated or invalid JSON in traceEvents")
        footer = stripped[pos + 1 :].strip(_WS)
        tail = _footer_keys(footer, is_array)
        if tail is not None:
            events = _decode_events(stripped[:pos].rstrip(_WS), stats)
            if events is not None:
                stats.top_level.update(tail)
                return events


def _footer_keys(footer: bytes, is_array: bool) -> dict[str, Any] | None:
    if is_array:
        return {} if not footer else None
    if not footer.endswith(b"}"):
        return None
    return _parse_object_part(footer[:-1])


def _decode_events(body: bytes, stats: ReadStats) -> list[Event] | None:
    """Decode ``{..}, {..}`` as events; None if it is not valid JSON (a bad cut)."""
    data = b"[" + body + b"]"
    try:
        return STRICT_EVENTS.decode(data)
    except msgspec.ValidationError:
        pass  # valid JSON with an odd field somewhere: take the slow, lenient path
    except msgspec.DecodeError:
        return None
    try:
        items = ANY_JSON.decode(data)
    except msgspec.DecodeError:  # pragma: no cover - strict decode already parsed it
        return None
    out: list[Event] = []
    for obj in items:
        ev = coerce_event(obj)
        if ev is None:
            stats.malformed_events += 1
        else:
            out.append(ev)
    return out
