"""Read a snapshot pickle in bounded memory: a restricted pickle machine that streams trace events.

``pickle.load`` builds every trace entry as a dict before anything can look at it: a 1 GB snapshot
becomes several GB of Python objects. This machine runs the same opcodes (the subset that plain
data uses; anything that names code is refused) but hands each entry of a ``device_traces`` list to
a callback as soon as it is complete and keeps nothing of it. What stays in memory is the pickle's
own reference table (one slot per memoized object; entries already handed over are blanked) and
the objects shared between entries (strings, stack frames), which do not grow with the history.

With no callbacks it keeps every object and is the whole-file reader: both readers are this one
machine, so no opcode means one thing to one and another to the other.

What a hostile file could make of a small pickle is bounded by the file's real content: a memo
index past anything the file could fill is refused (a 9-byte file asking for slot 2**32 would
otherwise cost gigabytes), as are tuples nested deeper than ``MAX_TUPLE_DEPTH`` (hashing a
deeply nested tuple as a dict key overflows the C stack), values piling up on the stack past
``MAX_PENDING`` (torch's pickles keep a batch of 1,000 items there at most) and ``DUP``, which
pickle never writes and which would let one object be listed twice without the memo. Every
refusal names the byte of the file it is about.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from torchdoctor.memory.errors import SnapshotError
from torchdoctor.memory.safe_pickle import check_header
from torchdoctor.memory.shape import HANDED

EventCallback = Callable[[int, dict[str, Any]], None]
"""Called with (key of the trace list the entry belongs to, the entry dict)."""
FramesCallback = Callable[[bytes, list[Any]], int]
"""Called with the opcodes of a frames list made only of memo references, and the memo; returns
the holder id that stands for the list (equal bytes always mean equal frames)."""

# EMPTY_LIST, MEMOIZE?, then batches of MARK (BINGET|LONG_BINGET)* APPENDS: a frames list whose
# frames were all seen before. 'e' can only match at an opcode boundary (h and j have fixed widths).
_FRAMES_LIST = re.compile(rb"\](\x94)?((?:\((?:h.|j....)*e)+)", re.S)
_MEMO_REF = re.compile(rb"h(.)|j(....)", re.S)

CHUNK_BYTES = 4 << 20
MAX_TUPLE_DEPTH = 200
MAX_PENDING = 1 << 20
_SWEEP_EVERY = 1 << 16  # memo slots between sweeps that blank handed-over entries
_MARGIN = 16  # bytes that every fixed-size opcode fits in
_REFUSED = frozenset(b"ci\x93Rbo\x81\x92\x82\x83\x84PQ\x97\x98")
_unpack_i = struct.Struct("<i").unpack_from
_unpack_I = struct.Struct("<I").unpack_from
_unpack_Q = struct.Struct("<Q").unpack_from
_unpack_H = struct.Struct("<H").unpack_from
_unpack_d = struct.Struct(">d").unpack_from


class _Truncated(Exception):
    """The buffer ends inside an opcode: read more and resume at the opcode's start."""


def _is_traces_key(obj: Any) -> bool:
    return type(obj) is str and obj == "device_traces"


class StreamingReader:
    """Runs one snapshot pickle, emitting trace entries through ``on_event``.

    After :meth:`run`, ``result`` is the top-level object with every trace list left empty, and
    ``trace_keys`` maps each emitted list key to its position in its enclosing list (the device).
    """

    def __init__(
        self,
        on_event: EventCallback | None = None,
        on_sweep: Callable[[list[Any], int], None] | None = None,
        on_frames: FramesCallback | None = None,
    ) -> None:
        """With ``on_event`` None the reader keeps everything (the whole-file reader)."""
        self.on_event = on_event
        self.on_sweep = on_sweep
        self.on_frames = on_frames
        # Without callbacks nothing is handed over: no frames shortcut, nothing blanked.
        self.memo_rewritten = on_frames is None
        self.stack: list[Any] = []
        self.metastack: list[list[Any]] = []
        self.memo: list[Any] = []
        self.swept_to = 0
        self._unfilled: list[int] = []
        self.trace_lists: dict[int, list[Any]] = {}
        self.result: Any = None
        # Entries handed over since the last sweep, kept alive so that no new object takes an
        # id of theirs before the sweep blanks their memo slots.
        self._emitted: dict[int, Any] = {}
        self._depths: dict[int, tuple[tuple[Any, ...], int]] = {}  # tuples holding tuples
        self._room = 0  # memo slots a PUT may skip: what the rest of the file could fill
        self._base = 0  # file offset of the buffer's first byte

    def trace_devices(self) -> dict[int, int]:
        """Key of each trace list that received entries -> its index in ``device_traces``."""
        traces = self.result.get("device_traces") if type(self.result) is dict else None
        found: dict[int, int] = {}
        for i, item in enumerate(traces if type(traces) is list else []):
            if type(item) is list and id(item) in self.trace_lists:
                if id(item) in found:
                    raise SnapshotError(
                        f"not a memory snapshot: device {i}'s trace is the list of device "
                        f"{found[id(item)]} (torch never shares one)"
                    )
                found[id(item)] = i
        return found

    def _emit(self, stack: list[Any], items: list[Any]) -> bool:
        """Hand ``items``, appended to ``stack[-1]``, over as trace entries if that list is one
        of ``device_traces``; False to append them as usual."""
        target = stack[-1]
        if self.on_event is None or type(target) is not list or not items:
            return False
        key = id(target)
        if key not in self.trace_lists:
            if not self._in_device_traces(stack):
                return False
            self.trace_lists[key] = target  # keeps the id valid until the end
            # One marker stays in the list: a later reference to it (as frames, say) then
            # reads as the other reader reads a list of entries, not as an empty list.
            target.append(HANDED)
        emitted, on_event = self._emitted, self.on_event
        for item in items:
            k = id(item)
            if k in emitted:
                item = HANDED  # the same entry twice: the sink refuses it, as the other reader
            else:
                emitted[k] = item
            on_event(key, item)
        return True

    def _in_device_traces(self, stack: list[Any]) -> bool:
        """Whether ``stack[-1]`` is being built as an item of a list keyed ``device_traces``:
        one device's list is appended to its parent on the same stack, several in a MARK
        batch whose parent waits on the stack below."""
        if len(stack) >= 3 and type(stack[-2]) is list and _is_traces_key(stack[-3]):
            return True
        outer = self.metastack[-1] if self.metastack else []
        return len(outer) >= 2 and type(outer[-1]) is list and _is_traces_key(outer[-2])

    def _sweep(self) -> None:
        if self.on_event is None:
            return  # the whole-file reader keeps every object
        memo, start, waiting = self.memo, self.swept_to, []
        for i in [*self._unfilled, *range(start, len(memo))]:
            value = memo[i]
            if type(value) is dict:
                if "action" in value:
                    memo[i] = HANDED  # a trace entry: handed over; a later reference is refused
                elif not value:
                    waiting.append(i)  # memoized before it is filled: look again next time
        self._unfilled = waiting
        self._emitted.clear()  # every entry handed over so far is HANDED in the memo now
        if self.on_sweep is not None:
            self.on_sweep(memo, start)
        self.swept_to = len(memo)

    def run(self, stream: IO[bytes], path: Path, size: int | None = None) -> Any:
        """Run the pickle in ``stream`` (``size`` bytes; by default its file's size)."""
        total = _size(stream) if size is None else size
        self._room = total
        head = stream.read(CHUNK_BYTES)
        check_header(path, head[:1])
        buf, pos, eof, want = head, 0, len(head) < CHUNK_BYTES, CHUNK_BYTES
        while True:
            try:
                pos = self._steps(buf, pos, len(buf) if eof else len(buf) - _MARGIN)
            except _Stop:
                self._sweep()
                return self.result
            except Exception as exc:
                raise self._refusal(path, exc, buf, eof) from None
            self._check_pending(path, self._base + pos)
            if eof:
                raise _truncated(path, self._base + len(buf))
            # An opcode bigger than the buffer (a long string) doubles the next read, so the
            # bytes kept across reads are copied a bounded number of times.
            want = want * 2 if pos == 0 else CHUNK_BYTES
            more = stream.read(want)
            eof = len(more) < want
            self._base += pos
            self._room = max(0, total - self._base)
            buf, pos = buf[pos:] + more, 0

    def _refusal(self, path: Path, exc: Exception, buf: bytes, eof: bool) -> SnapshotError:
        """The one-line error for ``exc``, raised at an opcode: which byte of the file it is."""
        at = self._base + _failed_at(exc)
        if isinstance(exc, SnapshotError):
            return SnapshotError(f"{path}: {exc} (at byte {at})")
        if isinstance(exc, IndexError | struct.error):
            if eof and at >= self._base + len(buf) - _MARGIN:
                return _truncated(path, self._base + len(buf))
            return SnapshotError(
                f"{path}: not a memory snapshot (malformed pickle: a reference to nothing, "
                f"at byte {at})"
            )
        if isinstance(exc, RecursionError):
            return SnapshotError(
                f"{path}: not a memory snapshot (values nest too deeply, at byte {at})"
            )
        if isinstance(exc, KeyError | TypeError | AttributeError | ValueError):
            return SnapshotError(
                f"{path}: not a memory snapshot (malformed pickle: {type(exc).__name__}, "
                f"at byte {at})"
            )
        raise exc

    def _check_pending(self, path: Path, at: int) -> None:
        if len(self.stack) > MAX_PENDING or len(self.metastack) > MAX_PENDING:
            raise SnapshotError(
                f"{path}: not a memory snapshot: more than {MAX_PENDING} values wait on the "
                f"pickle's stack at byte {at} (torch's pickles keep a batch of 1,000)"
            )

    def _steps(self, buf: bytes, pos: int, limit: int) -> int:
        """Run opcodes from ``pos`` while a whole opcode fits before ``limit``; return the new pos.

        One flat loop, commonest opcodes first: this is the hot path for gigabyte files.
        """
        stack, memo, metastack = self.stack, self.memo, self.metastack
        end = len(buf)
        try:
            return self._loop(buf, pos, limit, end, stack, memo, metastack)
        except _Truncated as exc:
            return int(exc.args[0])

    def _loop(
        self,
        buf: bytes,
        pos: int,
        limit: int,
        end: int,
        stack: list[Any],
        memo: list[Any],
        metastack: list[list[Any]],
    ) -> int:
        start = pos
        next_sweep = self.swept_to + _SWEEP_EVERY
        while pos < limit:
            op = buf[pos]
            start = pos
            pos += 1
            if op == 0x68:  # BINGET
                stack.append(memo[buf[pos]])
                pos += 1
            elif op == 0x6A:  # LONG_BINGET
                stack.append(memo[_unpack_I(buf, pos)[0]])
                pos += 4
            elif op == 0x94:  # MEMOIZE
                memo.append(stack[-1])
                if len(memo) >= next_sweep:
                    self._sweep()
                    next_sweep = len(memo) + _SWEEP_EVERY
            elif op == 0x8C:  # SHORT_BINUNICODE
                n = buf[pos]
                if pos + 1 + n > end:
                    raise _Truncated(start)
                stack.append(str(buf[pos + 1 : pos + 1 + n], "utf-8", "surrogatepass"))
                pos += 1 + n
            elif op == 0x8A:  # LONG1
                n = buf[pos]
                if pos + 1 + n > end:
                    raise _Truncated(start)
                stack.append(int.from_bytes(buf[pos + 1 : pos + 1 + n], "little", signed=True))
                pos += 1 + n
            elif op == 0x28:  # MARK
                metastack.append(stack)
                self.stack = stack = []
            elif op == 0x4B:  # BININT1
                stack.append(buf[pos])
                pos += 1
            elif op == 0x4A:  # BININT
                stack.append(_unpack_i(buf, pos)[0])
                pos += 4
            elif op == 0x7D:  # EMPTY_DICT
                stack.append({})
            elif op == 0x5D:  # EMPTY_LIST
                on_frames = self.on_frames
                if stack and stack[-1] == "frames" and not self.memo_rewritten and on_frames:
                    m = _FRAMES_LIST.match(buf, start)
                    if m is not None:
                        # a stack of frames already in the memo: hand over its holder id, not a list
                        holder = on_frames(m.group(2), memo)
                        stack.append(holder)
                        if m.group(1):
                            memo.append(holder)
                        pos = m.end()
                        continue
                stack.append([])
            elif op == 0x75:  # SETITEMS
                items = stack
                self.stack = stack = _pop_mark(metastack)
                d = stack[-1]
                for i in range(0, len(items), 2):
                    d[items[i]] = items[i + 1]
            elif op == 0x65:  # APPENDS
                items = stack
                self.stack = stack = _pop_mark(metastack)
                if not self._emit(stack, items):
                    stack[-1].extend(items)
            elif op == 0x4D:  # BININT2
                stack.append(_unpack_H(buf, pos)[0])
                pos += 2
            else:
                try:
                    pos = self._rare(op, buf, pos)
                except _Truncated:
                    raise _Truncated(start) from None
                stack = self.stack
        return pos

    def _rare(self, op: int, buf: bytes, pos: int) -> int:
        stack, end = self.stack, len(buf)
        if op == 0x95:  # FRAME: a hint for buffered readers; the bytes follow inline
            return pos + 8
        if op == 0x80:  # PROTO
            return pos + 1
        if op == 0x2E:  # STOP
            self.result = stack.pop()
            raise _Stop
        if op == 0x61:  # APPEND
            item = stack.pop()
            if not self._emit(stack, [item]):
                stack[-1].append(item)
        elif op == 0x73:  # SETITEM
            value = stack.pop()
            key = stack.pop()
            stack[-1][key] = value
        elif op in (0x58, 0x8D, 0x42, 0x43, 0x8E, 0x96, 0x54, 0x55):
            return self._sized(op, buf, pos, end)
        elif op in (0x29, 0x85, 0x86, 0x87, 0x74):  # tuples
            n = {0x29: 0, 0x85: 1, 0x86: 2, 0x87: 3}.get(op)
            if n is None:
                items = stack
                self.stack = stack = _pop_mark(self.metastack)
                stack.append(self._tuple(items))
            elif n == 0:
                stack.append(())
            else:
                items = stack[-n:]
                if len(items) < n:
                    raise IndexError("tuple of missing items")
                del stack[-n:]
                stack.append(self._tuple(items))
        elif op == 0x4E:
            stack.append(None)
        elif op in (0x88, 0x89):
            stack.append(op == 0x88)
        elif op == 0x47:  # BINFLOAT
            stack.append(_unpack_d(buf, pos)[0])
            return pos + 8
        elif op == 0x8B:  # LONG4
            n = _unpack_i(buf, pos)[0]
            if pos + 4 + n > end:
                raise _Truncated
            stack.append(int.from_bytes(buf[pos + 4 : pos + 4 + n], "little", signed=True))
            return pos + 4 + n
        elif op in (0x71, 0x72):  # BINPUT, LONG_BINPUT
            idx = buf[pos] if op == 0x71 else _unpack_I(buf, pos)[0]
            # a rewritten slot would make equal bytes mean different frames: no frames shortcut
            self.memo_rewritten = self.memo_rewritten or idx < len(self.memo)
            if idx - len(self.memo) > self._room - pos:
                raise SnapshotError(
                    f"not a memory snapshot: memo slot {idx} is beyond anything the rest of "
                    "the file could fill"
                )
            _put(self.memo, idx, stack[-1])
            return pos + (1 if op == 0x71 else 4)
        elif op in (0x30, 0x31, 0x32):
            self._pop_or_dup(op)
        elif op == 0x8F:  # EMPTY_SET
            stack.append(set())
        elif op in (0x6C, 0x64, 0x90, 0x91):
            self._marked_containers(op)
        elif op in _REFUSED:
            raise SnapshotError(
                "refusing to load: the file names Python code to run (opcode "
                f"{bytes([op])!r}); a memory snapshot holds only plain data "
                "(this file may be hostile)"
            )
        else:
            raise SnapshotError(f"not a memory snapshot: unsupported pickle opcode {op:#04x}")
        return pos

    def _sized(self, op: int, buf: bytes, pos: int, end: int) -> int:
        width = {0x58: 4, 0x8D: 8, 0x42: 4, 0x43: 1, 0x8E: 8, 0x96: 8, 0x54: 4, 0x55: 1}[op]
        if width == 1:
            n = buf[pos]
        elif width == 4:
            n = _unpack_I(buf, pos)[0]
        else:
            n = _unpack_Q(buf, pos)[0]
        body = pos + width
        if body + n > end:
            raise _Truncated
        raw = buf[body : body + n]
        if op in (0x58, 0x8D):
            self.stack.append(str(raw, "utf-8", "surrogatepass"))
        elif op in (0x54, 0x55):
            self.stack.append(raw.decode("latin-1"))
        else:
            self.stack.append(bytearray(raw) if op == 0x96 else bytes(raw))
        return body + n

    def _pop_or_dup(self, op: int) -> None:
        if op == 0x32:  # DUP: never written by pickle; it would list one object twice unseen
            raise SnapshotError("not a memory snapshot: unsupported pickle opcode DUP")
        if op == 0x31:  # POP_MARK
            self.stack = _pop_mark(self.metastack)
        elif self.stack:  # POP
            self.stack.pop()
        else:
            self.stack = _pop_mark(self.metastack)

    def _marked_containers(self, op: int) -> None:
        items = self.stack
        self.stack = stack = _pop_mark(self.metastack)
        if op == 0x6C:  # LIST
            stack.append(items)
        elif op == 0x64:  # DICT
            stack.append({items[i]: items[i + 1] for i in range(0, len(items), 2)})
        elif op == 0x90:  # ADDITEMS
            stack[-1].update(items)
        else:  # FROZENSET
            stack.append(frozenset(items))

    def _tuple(self, items: list[Any]) -> tuple[Any, ...]:
        """``tuple(items)``, refused past ``MAX_TUPLE_DEPTH`` levels of tuples in tuples.

        Hashing a tuple hashes its items with no depth check in CPython: a dict key nested a
        million tuples deep overflows the C stack (a segfault, not an exception). Lists and
        dicts are unhashable, so only chains of tuples need counting.
        """
        depth = 1
        depths = self._depths
        for x in items:
            if type(x) is tuple and x:
                got = depths.get(id(x))
                depth = max(depth, 1 + (got[1] if got is not None else 1))
        if depth > MAX_TUPLE_DEPTH:
            raise SnapshotError(
                f"not a memory snapshot: tuples nested more than {MAX_TUPLE_DEPTH} deep"
            )
        out = tuple(items)
        if depth > 1:
            depths[id(out)] = (out, depth)  # kept alive, so the id stays its own
        return out


class _Stop(Exception):
    pass


def _put(memo: list[Any], idx: int, value: Any) -> None:
    if idx == len(memo):
        memo.append(value)
    else:
        memo.extend([None] * (idx - len(memo)))
        memo.append(value)


def memo_refs(ops: bytes, memo: list[Any]) -> list[Any]:
    """The objects that a run of BINGET / LONG_BINGET opcodes (with MARK/APPENDS) refers to."""
    return [
        memo[m[1][0] if m[1] is not None else _unpack_I(m[2])[0]] for m in _MEMO_REF.finditer(ops)
    ]


def _pop_mark(metastack: list[list[Any]]) -> list[Any]:
    if not metastack:
        raise SnapshotError("not a memory snapshot: malformed pickle (unbalanced MARK)")
    return metastack.pop()


def _size(stream: IO[bytes]) -> int:
    """Bytes left in ``stream`` (a file or a BytesIO)."""
    import io
    import os

    if isinstance(stream, io.BytesIO):
        return len(stream.getbuffer()) - stream.tell()
    try:
        return os.fstat(stream.fileno()).st_size - stream.tell()
    except (OSError, AttributeError, ValueError):
        return 1 << 62


def _truncated(path: Path, at: int) -> SnapshotError:
    return SnapshotError(f"{path}: the file is truncated (the pickle ends early, at byte {at})")


def _failed_at(exc: BaseException) -> int:
    """The buffer offset of the opcode ``exc`` was raised at (the machine's loop keeps it in
    ``start``; read from the traceback, so the hot loop pays nothing for it)."""
    at = 0
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name in ("_loop", "_rare") and "start" in frame.f_locals:
            at = int(frame.f_locals["start"])
        tb = tb.tb_next
    return at
