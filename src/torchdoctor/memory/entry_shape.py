"""A fast path for trace entries: one regular expression matches a whole entry's opcodes.

Every entry of a torch snapshot has the same keys in the same order, and after the first few
entries every key and string value is a memo reference. So once the streaming reader has seen one
entry, it compiles the opcode shape of such an entry (keys as their memo references, values as
small ints, LONG1 ints, memo references or a frames list of memo references) and decodes a matching
entry from the match groups, instead of dispatching its ~25 opcodes one by one. Anything that does
not match (a new string, another layout, the end of the buffer) takes the general path.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any

_REF = rb"h.|j...."
_INT = rb"K.|M..|J....|" + b"|".join(b"\\x8a" + bytes([n]) + b"." * n for n in range(1, 9))
_FRAMES = rb"\](?:\x94)?(?:\((?:h.|j....)*e)+|h.|j...."
_unpack_I = struct.Struct("<I").unpack_from
_unpack_H = struct.Struct("<H").unpack_from
_unpack_i = struct.Struct("<i").unpack_from

INT, REF, FRAMES = 0, 1, 2


def _ref_bytes(idx: int) -> bytes:
    return b"h" + bytes([idx]) if idx < 256 else b"j" + struct.pack("<I", idx)


def _int(raw: bytes) -> int:
    op = raw[0]
    if op == 0x4B:
        return raw[1]
    if op == 0x4D:
        return int(_unpack_H(raw, 1)[0])
    if op == 0x4A:
        return int(_unpack_i(raw, 1)[0])
    return int.from_bytes(raw[2:], "little", signed=True)


class EntryShape:
    """The opcode shape of one trace entry layout; :meth:`match` decodes entries that have it."""

    def __init__(self, keys: list[str], kinds: list[int], pattern: bytes) -> None:
        self.keys = keys
        self.kinds = kinds
        self.regex = re.compile(pattern, re.S)

    @classmethod
    def learn(cls, entry: dict[str, Any], memo: list[Any]) -> EntryShape | None:
        """The shape of entries laid out like ``entry``, or None when it has no simple shape."""
        wanted = set(entry)
        where: dict[str, int] = {}
        for i, value in enumerate(memo):
            if type(value) is str and value in wanted and value not in where:
                where[value] = i
        if len(where) != len(wanted):
            return None
        parts, kinds = [rb"\}\x94\("], []
        for key, value in entry.items():
            kind = (
                FRAMES
                if key == "frames"
                else INT
                if type(value) is int
                else REF
                if type(value) is str
                else None
            )
            if kind is None:
                return None
            kinds.append(kind)
            parts.append(
                re.escape(_ref_bytes(where[key])) + b"(" + (_INT, _REF, _FRAMES)[kind] + b")"
            )
        parts.append(b"u")
        return cls(list(entry), kinds, b"".join(parts))

    def match(
        self, buf: bytes, start: int, memo: list[Any], on_frames: Callable[[bytes, list[Any]], int]
    ) -> tuple[dict[str, Any], int] | None:
        """(the entry, the position after it) when the bytes at ``start`` have this shape."""
        m = self.regex.match(buf, start)
        if m is None:
            return None
        memo.append(None)  # the entry dict's own slot: entries are never referenced again
        entry: dict[str, Any] = {}
        for key, kind, raw in zip(self.keys, self.kinds, m.groups(), strict=True):
            if kind == INT:
                entry[key] = _int(raw)
            elif raw[0] == 0x68:
                entry[key] = memo[raw[1]]
            elif raw[0] == 0x6A:
                entry[key] = memo[_unpack_I(raw, 1)[0]]
            else:  # a fresh frames list of memo references
                memoized = raw[1] == 0x94
                holder = on_frames(raw[2:] if memoized else raw[1:], memo)
                if memoized:
                    memo.append(holder)
                entry[key] = holder
        return entry, m.end()
