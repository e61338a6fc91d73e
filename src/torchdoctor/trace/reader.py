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
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import msgspec

from torchdoctor.errors import TraceError
from torchdoctor.trace.events import ANY_JSON

CHUNK_BYTES = 2 << 20
"""Decompressed bytes per read and (about) per chunk: small enough for two processes to share the
work of a 50 MB trace evenly, big enough that per-chunk overhead stays under 1%."""
# Blanks between events are bounded so that a match never rescans a run of megabytes of them;
# a gap wider than this is just not a place to cut (the chunk grows past it).
_BOUNDARY = re.compile(rb"\}[ \t\r\n]{0,4096}(,)[ \t\r\n]{0,4096}\{")
_WS = b" \t\r\n"
_KEY = b'"traceEvents"'
_FOOTER_START = re.compile(rb"\s*(?:,|\}|$)")
_MAX_FOOTER = 1 << 20
_MAX_TRIES = 256
_OPEN = re.compile(rb"\s*(:?)\s*(\[?)")
MAX_HEADER_BYTES = 64 << 20
"""Bytes before the events array at most (Kineto writes a few KiB of metadata there)."""
MAX_EVENT_BYTES = 128 << 20
"""One event at most (the largest real ones, with a Python stack, are a few KiB)."""

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
    bytes_read: int = 0
    """Decompressed JSON bytes read."""
    tail_chunk: bytearray | None = None
    """The last chunk (set when the end of the file is reached)."""
    tail_rest: bytes = b""
    """The file's text after the last chunk's events: "]" and the keys after the array."""
    tail_keys: dict[str, Any] | None = None
    """Top-level keys after the events array, if ``tail_rest`` parses as such."""
    is_array: bool = False
    """The file is a bare array of events (no top-level object)."""


def open_trace(path: Path) -> IO[bytes]:
    """Open a trace for binary reading, decompressing gzip by its magic bytes (not its name).

    Only a regular file is read: a FIFO or a device would block or never end. The file is
    opened without blocking and checked before any byte is read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode) or not stat.S_ISREG(mode):
        os.close(fd)
        from torchdoctor.inputs import kind_of

        what = "a directory" if stat.S_ISDIR(mode) else kind_of(mode)
        raise TraceError(f"{path}: is {what}, not a trace file")
    fh: IO[bytes] = os.fdopen(fd, "rb")
    magic = fh.read(2)
    fh.seek(0)
    if magic == b"\x1f\x8b":
        return _gzip_impl.GzipFile(fileobj=fh, mode="rb")
    return fh


def json_bytes_hint(path: Path) -> int | None:
    """About how many JSON bytes a regular file holds (None for anything else: a pipe, a folder).

    A gzip file's last four bytes are its size modulo 4 GiB; a file that compresses less than
    usual, or wrapped past 4 GiB, is taken at 16 times its compressed size.
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # opening a FIFO would block until a writer comes
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            if fh.read(2) != b"\x1f\x8b" or st.st_size < 18:
                return st.st_size
            fh.seek(-4, os.SEEK_END)
            isize = int.from_bytes(fh.read(4), "little")
    except OSError:
        return None
    return isize if isize >= st.st_size * 4 else st.st_size * 16


class NeedBytes(Exception):
    """A ``Skipped`` chunk's bytes were needed after all (its decoder failed, or the chunk was
    cut inside an event): the caller reads the file again without skipping."""


def chunk_bytes(chunk: bytearray | Skipped) -> bytearray:
    """The chunk's bytes; NeedBytes if it was skipped."""
    if isinstance(chunk, Skipped):
        raise NeedBytes
    return chunk


class Skipped:
    """A chunk cut but not copied out, because another process decodes it (see ``skip``).

    Only its length is kept; a consumer that needs its bytes after all reads the file again.
    """

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size


def iter_json_chunks(
    path: Path, stats: ReadStats, skip: Callable[[int], bool] | None = None
) -> Iterator[bytearray | Skipped]:
    """Yield the events array as a sequence of JSON arrays (``[{..}, {..}]``), in file order.

    Concatenating the chunks' contents gives the array back. Top-level keys before and after the
    array go to ``stats.top_level``. Raises TraceError (one line) on anything that is not a trace.
    Where ``skip(i)`` is true, chunk ``i`` may come as a ``Skipped`` (same cut, bytes not
    copied); the cuts are the same either way.
    """
    with open_trace(path) as fh:
        read = _make_reader(fh, path, stats)
        buf, is_array = _seek_events(read, path, stats)
        stats.is_array = is_array
        yield from _split_array(read, buf, is_array, stats, skip, path)


def join_chunks(first: bytearray, second: bytearray) -> bytearray:
    """The two chunks' text joined back into one array (undoes a cut at a false boundary)."""
    return first[:-1] + b"," + second[1:]


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
    first = _first_bytes(read, path)
    if first[:1] == b"[":
        return first[1:], True
    if first[:1] != b"{":
        raise TraceError(f"{path}: not a JSON trace (starts with {first[:12]!r})")
    # The first read holds the key in real traces; a bytearray (which grows in place, with no
    # copy per read) is made only when the header runs on.
    buf: bytes | bytearray = first
    start = 0
    while True:
        idx = buf.find(_KEY, start)
        if idx < 0:
            if len(buf) > MAX_HEADER_BYTES:
                _too_long_header(buf, path)
            more = read()
            if not more:
                _no_events(buf, path)
            start = max(0, len(buf) - len(_KEY))
            buf = buf if isinstance(buf, bytearray) else bytearray(buf)
            buf += more
            continue
        head = _parse_object_part(buf[1:idx], path)
        if head is None:  # the key text appeared inside a value: keep looking
            start = idx + 1
            continue
        after = idx + len(_KEY)
        m = _OPEN.match(buf, after)
        while m is None or m.end() == len(buf):  # only blanks so far: the "[" may come next
            more = read()
            if not more:
                raise TraceError(f"{path}: truncated JSON after traceEvents")
            buf = buf + more
            m = _OPEN.match(buf, after)
        if not (m.group(1) and m.group(2)):
            raise TraceError(f"{path}: traceEvents is not an array")
        stats.top_level.update(head)
        return bytes(buf[m.end() :]), False


def _first_bytes(read: Callable[[], bytes], path: Path) -> bytes:
    """The first read with a byte-order mark and leading blanks removed (never empty)."""
    buf = read()
    if buf.startswith(b"\xef\xbb\xbf"):
        buf = buf[3:]
    buf = buf.lstrip(_WS)
    while not buf:
        more = read()
        if not more:
            raise TraceError(f"{path}: empty file")
        buf = more.lstrip(_WS)
    return buf


def _no_events(buf: bytes | bytearray, path: Path) -> None:
    try:
        ANY_JSON.decode(buf)
    except msgspec.DecodeError:
        raise TraceError(f"{path}: truncated or invalid JSON (no traceEvents found)") from None
    except RecursionError:
        raise too_deep(path) from None
    raise TraceError(f"{path}: no traceEvents in this JSON: not a torch.profiler trace")


def _too_long_header(buf: bytes | bytearray, path: Path) -> None:
    nul = buf.find(b"\x00")
    if nul >= 0:
        raise TraceError(f"{path}: byte {nul} of the JSON is a NUL: not JSON text")
    raise TraceError(
        f"{path}: no traceEvents array in the first {MAX_HEADER_BYTES >> 20} MiB: "
        "not a torch.profiler trace"
    )


def too_deep(path: Path) -> TraceError:
    """The error for JSON nested deeper than the decoder goes (real traces nest a few levels)."""
    return TraceError(f"{path}: the JSON nests too deeply (hundreds of levels): not a trace")


def _parse_object_part(body: bytes | bytearray, path: Path) -> dict[str, Any] | None:
    """Decode ``"k": v, "k2": v2`` (with stray commas stripped) as a dict, or None if invalid."""
    body = body.strip(_WS).strip(b",").strip(_WS)
    if not body:
        return {}
    try:
        value = ANY_JSON.decode(b"{" + body + b"}")
    except msgspec.DecodeError:
        return None
    except RecursionError:
        raise too_deep(path) from None
    return value if isinstance(value, dict) else None


def _split_array(
    read: Callable[[], bytes],
    first: bytes,
    is_array: bool,
    stats: ReadStats,
    skip: Callable[[int], bool] | None,
    path: Path,
) -> Iterator[bytearray | Skipped]:
    """Cut the events array after the last event boundary of each buffer-full."""
    # The buffer starts with "[": a cut turns the boundary's comma into "]" and hands the buffer
    # itself over as the chunk, so only the few bytes after the cut are ever copied.
    buf = bytearray(b"[")
    more, index = first, 0
    lo = 1  # boundaries starting before this byte of ``buf`` were ruled out already
    while True:
        # A chunk to skip is cut in the new bytes alone when they hold a boundary: the last
        # boundary of buffer + new bytes is then theirs, so the cut is the same, with no copy.
        cut = _last_boundary(more, 0) if skip is not None and skip(index) else None
        if cut is not None:
            end, next_start = cut
            yield Skipped(len(buf) + end + 1)
            buf = bytearray(b"[")
            buf += memoryview(more)[next_start:]
            index += 1
        else:
            buf += more
            cut = _last_boundary(buf, lo)
            if cut is not None:
                end, next_start = cut
                rest = buf[next_start:]
                buf[end] = 0x5D  # "]"
                del buf[end + 1 :]
                yield buf
                buf = bytearray(b"[")
                buf += rest
                index += 1
            else:
                _check_growth(buf, more, stats, path)
        # Only a match that ran into the buffer's end can change with more bytes.
        lo = max(1, len(buf) - _BOUNDARY_SPAN)
        more = read()
        if not more:
            break
    yield _tail_chunk(bytes(memoryview(buf)[1:]), is_array, stats, path)


def _check_growth(buf: bytearray, more: bytes, stats: ReadStats, path: Path) -> None:
    """Refuse what no trace holds before it fills memory: a NUL (never valid in JSON text) in
    an event that spans reads, or one event bigger than ``MAX_EVENT_BYTES``."""
    nul = more.find(b"\x00")
    if nul >= 0:
        at = stats.bytes_read - len(more) + nul
        raise TraceError(f"{path}: byte {at} of the JSON is a NUL: not JSON text")
    if len(buf) > MAX_EVENT_BYTES:
        at = stats.bytes_read - len(buf) + 1
        raise TraceError(
            f"{path}: one event from byte {at} is bigger than {MAX_EVENT_BYTES >> 20} MiB: "
            "not a torch.profiler trace"
        )


_BOUNDARY_SPAN = 2 * 4096 + 3  # the longest text a boundary match can cover
_FIRST_WINDOW = 4096
_FAST_TRIES = 64


def _last_boundary(buf: bytes | bytearray, lo: int) -> tuple[int, int] | None:
    """(position of the comma after the last complete-looking event, the byte after it), for a
    boundary starting at ``lo`` or later; None if there is none.

    Cutting at the comma keeps every other byte in one chunk or the other, so joining two
    chunks with a comma gives back the original text, even if the cut was inside a string.
    The last few "}" are tried first (in a real trace the last boundary is a few hundred bytes
    from the end); past ``_FAST_TRIES`` of them the rest is scanned once (``_scan_back``).
    """
    pos = len(buf)
    for _ in range(_FAST_TRIES):
        pos = buf.rfind(b"}", lo, pos)
        if pos < 0:
            return None  # one event bigger than the buffer so far: read more
        m = _BOUNDARY.match(buf, pos)
        if m is not None:
            return m.start(1), m.start(1) + 1
    return _scan_back(buf, lo, pos)


def _scan_back(buf: bytes | bytearray, lo: int, hi: int) -> tuple[int, int] | None:
    """The last boundary starting in ``[lo, hi)``: backwards through windows that double in
    size, each scanned forwards by the regular expression engine, so the bytes are scanned once
    at worst whatever they hold (a name made of a million "}" costs no more than other text)."""
    width = _FIRST_WINDOW
    while hi > lo:
        start = max(lo, hi - width)
        last = None
        for m in _BOUNDARY.finditer(buf, start, min(len(buf), hi + _BOUNDARY_SPAN)):
            if m.start() >= hi:
                break
            last = m
        if last is not None:
            return last.start(1), last.start(1) + 1
        hi, width = start, width * 2
    return None  # one event bigger than the buffer so far: read more


def _tail_chunk(buf: bytes, is_array: bool, stats: ReadStats, path: Path) -> bytearray:
    """The last events as a JSON array; what follows them goes to ``stats``.

    The array ends at the last "]" after which the rest parses as the top-level object's last
    keys. If a "]" inside one of those keys passes for it, the chunk's decode reports trailing
    characters and the consumer finds the true end there (see ``footer_after``).
    """
    data = buf.rstrip(_WS)
    keys: dict[str, Any] | None
    if is_array and not data.endswith(b"]"):
        # The Chrome trace format allows a bare array to lose its closing bracket.
        end, keys = len(data.rstrip(b",")), {}
    else:
        end, keys = _array_end(data, is_array, path)
    chunk = bytearray(b"[")
    chunk += data[:end]
    chunk += b"]"
    stats.tail_chunk, stats.tail_rest, stats.tail_keys = chunk, data[end:], keys
    return chunk


def _array_end(data: bytes, is_array: bool, path: Path) -> tuple[int, dict[str, Any] | None]:
    """(index of the "]" that ends the events array, keys after it), or (len, None)."""
    if data.endswith(b"]" if is_array else b"}"):
        # Footers are a few small keys; bounding the search keeps a file truncated right after
        # an event (where every "]" looks like a candidate) from costing quadratic time.
        floor, tries, pos = max(0, len(data) - _MAX_FOOTER), 0, len(data)
        while tries < _MAX_TRIES and (pos := data.rfind(b"]", floor, pos)) >= 0:
            if _FOOTER_START.match(data, pos + 1):
                tries += 1
                keys = footer_keys(data[pos + 1 :], is_array, path)
                if keys is not None:
                    return pos, keys
    return len(data), None  # cut off mid-way: the chunk will not decode


def footer_keys(text: bytes, is_array: bool, path: Path) -> dict[str, Any] | None:
    """The top-level keys in the text after the events array's "]", or None if it is not that."""
    footer = text.strip(_WS)
    if is_array:
        return {} if not footer else None
    if not footer.endswith(b"}"):
        return None
    return _parse_object_part(footer[:-1], path)
