"""Stream the events array of a Kineto trace file as JSON chunks, without holding the whole file.

A trace is ``{"schemaVersion": ..., "traceEvents": [ {...}, {...}, ... ], "traceName": ...}`` (or a
bare array of events). The reader finds the ``traceEvents`` array and cuts it at event boundaries
(``}`` then ``,`` then ``{``) into chunks of a few MiB, each a JSON array on its own. The cut is found
with a byte search, not a parse, so it can fall inside a string or a nested object; such a chunk
fails to decode as "truncated", and the consumer joins it with the next one (``join_chunks``).
Peak memory is a few chunks plus the columns built from them, not the file size.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import msgspec

from torchdoctor.errors import TraceError
from torchdoctor.trace.events import ANY_JSON

CHUNK_BYTES = 4 << 20
"""Decompressed bytes per read and (about) per chunk: small enough for two processes to share the
work of a 50 MB trace evenly, big enough that per-chunk overhead stays under 1%."""
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_WS = b" \t\r\n"
_KEY = b'"traceEvents"'

_gzip_impl: ModuleType = gzip
_GZIP_ERRORS: tuple[type[BaseException], ...] = (EOFError, gzip.BadGzipFile, zlib.error, ValueError)
try:  # python-isal's igzip inflates about 3x faster than zlib; zlib stays the fallback
    from isal import igzip, isal_zlib

    _gzip_impl = igzip
    _GZIP_ERRORS += (isal_zlib.error,)  # type: ignore[operator]
except ImportError:  # pragma: no cover - isal is a dependency, but keep working without it
    pass


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
        return _gzip_impl.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    return fh


def iter_json_chunks(path: Path, stats: ReadStats) -> Iterator[bytes]:
    """Yield the events array as a sequence of JSON arrays (``[{..}, {..}]``), in file order.

    Concatenating the chunks' contents gives the array back. Top-level keys before and after the
    array go to ``stats.top_level``. Raises TraceError (one line) on anything that is not a trace.
    """
    with open_trace(path) as fh:
        read = _make_reader(fh, path, stats)
        buf, is_array = _seek_events(read, path, stats)
        yield from _split_array(read, buf, is_array, path, stats)


def join_chunks(first: bytes, second: bytes) -> bytes:
    """One JSON array holding the items of two chunks (undoes a cut at a false boundary)."""
    if first.strip(b"[] \t\r\n") == b"":
        return second
    if second.strip(b"[] \t\r\n") == b"":
        return first
    return first[: first.rindex(b"]")] + b"," + second[second.index(b"[") + 1 :]


def _make_reader(fh: IO[bytes], path: Path, stats: ReadStats) -> Callable[[], bytes]:
    def read() -> bytes:
        try:
            data = fh.read(CHUNK_BYTES)
        except _GZIP_ERRORS as exc:
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


def _split_array(
    read: Callable[[], bytes], first: bytes, is_array: bool, path: Path, stats: ReadStats
) -> Iterator[bytes]:
    """Cut the events array after the last event boundary of each buffer-full."""
    # A bytearray deletes from the front in O(1), so the rest of a buffer is never copied.
    buf = bytearray(first)
    while True:
        more = read()
        if not more:
            break
        buf += more
        cut = _last_boundary(buf)
        if cut is not None:
            end, next_start = cut
            chunk = bytearray(b"[")
            chunk += memoryview(buf)[:end]
            chunk += b"]"
            del buf[:next_start]
            yield bytes(chunk)
    yield _tail_chunk(bytes(buf), is_array, path, stats)


def _last_boundary(buf: bytes | bytearray) -> tuple[int, int] | None:
    """(end of the last complete-looking event, start of the next one), or None if none yet."""
    pos = len(buf)
    while True:
        pos = buf.rfind(b"}", 0, pos)
        if pos < 0:
            return None  # one event bigger than the buffer so far: read more
        m = _BOUNDARY.match(buf, pos)
        if m is not None:
            return pos + 1, m.end() - 1


def _tail_chunk(buf: bytes, is_array: bool, path: Path, stats: ReadStats) -> bytes:
    """The last events as a JSON array; the top-level keys after the array go to ``stats``."""
    stripped = buf.rstrip(_WS)
    if is_array and not stripped.endswith(b"]"):
        # The Chrome trace format allows a bare array to lose its closing bracket.
        return b"[" + stripped.rstrip(b",") + b"]"
    first: tuple[int, dict[str, Any]] | None = None
    pos = len(stripped)
    while (pos := stripped.rfind(b"]", 0, pos)) >= 0:
        tail = _footer_keys(stripped[pos + 1 :].strip(_WS), is_array)
        if tail is None:
            continue
        first = first or (pos, tail)
        # A "]" inside a footer value can pass for the array's end: accept a candidate only if
        # the array would end with a whole event (or be empty).
        if _ends_with_event(stripped, pos):
            first = (pos, tail)
            break
    if first is None:
        raise TraceError(f"{path}: truncated or invalid JSON in traceEvents")
    pos, tail = first
    stats.top_level.update(tail)
    return b"[" + stripped[:pos] + b"]"


def _ends_with_event(data: bytes, end: int) -> bool:
    body = data[:end].rstrip(_WS)
    if not body:
        return True
    cut = _last_boundary(body)
    try:
        return isinstance(ANY_JSON.decode(body[cut[1] if cut else 0 :]), dict)
    except msgspec.DecodeError:
        return False


def _footer_keys(footer: bytes, is_array: bool) -> dict[str, Any] | None:
    if is_array:
        return {} if not footer else None
    if not footer.endswith(b"}"):
        return None
    return _parse_object_part(footer[:-1])
