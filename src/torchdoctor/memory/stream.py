"""Read a snapshot pickle in bounded memory: a restricted pickle machine that streams trace events.

``pickle.load`` builds every trace entry as a dict before anything can look at it: a 1 GB snapshot
becomes several GB of Python objects. This machine runs the same opcodes (the subset that plain
data uses; anything that names code is refused) but hands each entry of a ``device_traces`` list to
a callback as soon as it is complete and keeps nothing of it. What stays in memory is the pickle's
own reference table (one slot per memoized object; entries already handed over are blanked) and
the objects shared between entries (strings, stack frames), which do not grow with the history.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from torchdoctor.memory.errors import SnapshotError
from torchdoctor.memory.safe_pickle import check_header

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


def _is_entry(obj: Any) -> bool:
    return type(obj) is dict and "action" in obj


class StreamingReader:
    """Runs one snapshot pickle, emitting trace entries through ``on_event``.

    After :meth:`run`, ``result`` is the top-level object with every trace list left empty, and
    ``trace_keys`` maps each emitted list key to its position in its enclosing list (the device).
    """

    def __init__(
        self,
        on_event: EventCallback,
        on_sweep: Callable[[list[Any], int], None],
        on_frames: FramesCallback,
    ) -> None:
        self.on_event = on_event
        self.on_sweep = on_sweep
        self.on_frames = on_frames
        self.memo_rewritten = False
        self.stack: list[Any] = []
        self.metastack: list[list[Any]] = []
        self.memo: list[Any] = []
        self.swept_to = 0
        self._unfilled: list[int] = []
        self.trace_lists: dict[int, list[Any]] = {}
        self.result: Any = None

    def trace_devices(self) -> dict[int, int]:
        """Key of each trace list that received entries -> its index in the enclosing list."""
        found: dict[int, int] = {}
        for obj in self.memo_and_result():
            if type(obj) is list:
                for i, item in enumerate(obj):
                    if type(item) is list and id(item) in self.trace_lists:
                        found[id(item)] = i
        return found

    def memo_and_result(self) -> list[Any]:
        objs = [self.result]
        if type(self.result) is dict:
            objs.extend(self.result.values())
        return objs

    def _emit(self, target: Any, items: list[Any]) -> bool:
        if not (items and _is_entry(items[0]) and type(target) is list):
            return False
        key = id(target)
        self.trace_lists[key] = target  # keeps the id valid until the end
        for item in items:
            self.on_event(key, item)
        return True

    def _sweep(self) -> None:
        memo, start, waiting = self.memo, self.swept_to, []
        for i in [*self._unfilled, *range(start, len(memo))]:
            value = memo[i]
            if type(value) is dict:
                if "action" in value:
                    memo[i] = None  # a trace entry: handed over; entries are never referenced again
                elif not value:
                    waiting.append(i)  # memoized before it is filled: look again next time
        self._unfilled = waiting
        self.on_sweep(memo, start)
        self.swept_to = len(memo)

    def run(self, stream: IO[bytes], path: Path) -> Any:
        head = stream.read(CHUNK_BYTES)
        check_header(path, head[:1])
        buf, pos, eof = head, 0, len(head) < CHUNK_BYTES
        while True:
            try:
                pos = self._steps(buf, pos, len(buf) if eof else len(buf) - _MARGIN)
            except _Stop:
                self._sweep()
                return self.result
            except (IndexError, struct.error):
                if eof:
                    raise SnapshotError(
                        f"{path}: the file is truncated (the pickle ends early)"
                    ) from None
                raise SnapshotError(f"{path}: not a memory snapshot (malformed pickle)") from None
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                raise SnapshotError(
                    f"{path}: not a memory snapshot (malformed pickle: {exc})"
                ) from None
            if eof:
                raise SnapshotError(f"{path}: the file is truncated (the pickle ends early)")
            more = stream.read(CHUNK_BYTES)
            eof = len(more) < CHUNK_BYTES
            buf, pos = buf[pos:] + more, 0

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
                if stack and stack[-1] == "frames" and not self.memo_rewritten:
                    m = _FRAMES_LIST.match(buf, start)
                    if m is not None:
                        # a stack of frames already in the memo: hand over its holder id, not a list
                        holder = self.on_frames(m.group(2), memo)
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
                if not self._emit(stack[-1], items):
                    stack[-1].extend(items)
            elif op == 0x4D:  # BININT2
                stack.append(_unpack_H(buf, pos)[0])
                pos += 2
            else:
                try:
                    pos = self._rare(op, buf, pos, start)
                except _Truncated:
                    raise _Truncated(start) from None
                stack = self.stack
        return pos

    def _rare(self, op: int, buf: bytes, pos: int, start: int) -> int:
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
            if not self._emit(stack[-1], [item]):
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
                stack.append(tuple(items))
            else:
                _tuple(stack, n)
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
                f"{bytes([op])!r} at byte {start}); a memory snapshot holds only plain data "
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
        if op == 0x32:  # DUP
            self.stack.append(self.stack[-1])
        elif op == 0x31:  # POP_MARK
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


def _tuple(stack: list[Any], n: int) -> None:
    if n == 0:
        stack.append(())
        return
    items = tuple(stack[-n:])
    del stack[-n:]
    stack.append(items)
