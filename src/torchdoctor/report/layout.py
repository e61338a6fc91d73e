"""Tables for the terminal that never cut a number.

Every column but one is printed whole: numbers, units, categories. The one flexible column (a
kernel or operator name) takes the width that is left, shortened from the middle so its head and
tail stay (``unrolled_elementwise_kernel<…>`` keeps its template marker, a long operator name its
last word), or wrapped at spaces when the column holds words. A header wider than its column
wraps at its spaces. Below ``STACK_BELOW`` columns when a name would be shortened, or when the
name would get fewer than ``MIN_NAME`` columns, the table stacks: each row's name on a line of its own, its values on the
line below, under one header. A values line wider than the terminal is left for the terminal to
wrap, never cut.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rich.cells import cell_len
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console

STACK_BELOW = 80
"""Narrower than this, a table whose names would be shortened stacks: a name's line, then its
values."""
MIN_NAME = 24
"""The fewest columns a name gets beside its values before the table stacks instead."""
_GAP = "  "
_ELLIPSIS = "…"
_NUMBER_SPACE = re.compile(r"([\d±]) (?=\S)")

Flex = Literal["shorten", "wrap"]


@dataclass(frozen=True)
class Column:
    """One column: its header, alignment, and whether it is the table's flexible column."""

    header: str
    right: bool = True
    """Right-aligned (numbers) or left-aligned (words)."""
    flex: Flex | None = None
    """The column that gives up width: ``shorten`` (from the middle) or ``wrap`` (at spaces)."""


@dataclass(frozen=True)
class TableText:
    """A table's content, ready to be laid out at any width."""

    columns: tuple[Column, ...]
    rows: tuple[tuple[str, ...], ...]
    """Cells as text; a cell other than the flexible one may hold several lines."""
    title: str = ""
    caption: str = ""
    bold_rows: frozenset[int] = frozenset()
    """Positions of rows printed in bold (a total line)."""


def middle(text: str, width: int) -> str:
    """``text`` shortened to ``width`` columns by cutting its middle (head and tail kept)."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return _ELLIPSIS[:width]
    keep = width - 1
    head = text[: (keep + 1) // 2]
    tail = text[len(text) - keep // 2 :] if keep // 2 else ""
    return head + _ELLIPSIS + tail


def lines(table: TableText, width: int) -> list[Text]:
    """The table as lines of at most ``width`` columns (a stacked values line may be wider)."""
    flex = next((i for i, c in enumerate(table.columns) if c.flex), None)
    out = [Text(x, style="bold") for x in _wrap(table.title, width)] if table.title else []
    body = _wide(table, width, flex)
    if body is None:
        assert flex is not None  # a table without a flexible column always lays out wide
        body = _stacked(table, width, flex)
    out += body
    if table.caption:
        out += [Text(x) for x in _wrap(table.caption, max(width, 20))]
    return out


def print_table(con: Console, table: TableText) -> None:
    """Print the table to ``con`` at its width; nothing is cropped or folded by the console."""
    for line in lines(table, con.size.width):
        con.print(line, soft_wrap=True)


def _fixed_widths(
    table: TableText, skip: int | None, room: int, whole_room: int | None = None
) -> list[int]:
    """Widths of the columns other than ``skip``: cells and headers whole if they fit in
    ``whole_room`` (default ``room``); else headers wrapped at their spaces; if that does not fit
    in ``room``, cells wrapped at their spaces too (a word, a number with its unit, is never
    split)."""
    n = range(len(table.columns))
    cells = [max([_longest(r[i]) for r in table.rows] or [0]) for i in n]
    words = [max([_longest_word(r[i]) for r in table.rows] or [0]) for i in n]
    heads = [cell_len(c.header) for c in table.columns]
    head_words = [_longest_word(c.header) for c in table.columns]
    keep = [i for i in n if i != skip]
    whole = [max(cells[i], heads[i]) for i in n]
    fits_whole = _sum(whole, keep) <= (room if whole_room is None else whole_room)
    widths = whole if fits_whole else [max(cells[i], head_words[i]) for i in n]
    # Still too wide: wrap the cells that give back the most columns first, one at a time.
    for i in sorted(keep, key=lambda i: words[i] - widths[i]):
        if _sum(widths, keep) <= room:
            break
        widths[i] = max(words[i], head_words[i])
    return [widths[i] if i != skip else 0 for i in n]


def _sum(widths: Sequence[int], keep: Sequence[int]) -> int:
    return sum(widths[i] for i in keep) + len(_GAP) * (len(keep) - 1)


def _longest_word(value: str) -> int:
    """The width of the longest run a cell's text keeps together when it wraps."""
    held = _NUMBER_SPACE.sub("\\1\u00a0", value)
    return max([cell_len(w) for w in re.split(r"[ \t\n]+", held)] or [0])  # not at U+00A0


def _wide(table: TableText, width: int, flex: int | None) -> list[Text] | None:
    """One line per row (more where a name wraps), or None when the table must stack."""
    cols = table.columns
    if flex is None:
        widths = _fixed_widths(table, None, width - 1)
    else:
        name_full = max([cell_len(r[flex]) for r in table.rows] + [cell_len(cols[flex].header)])
        # Whole headers only where the names then print whole too: a name is worth more than a
        # header on one line.
        widths = _fixed_widths(
            table, flex, width - 1 - MIN_NAME - len(_GAP), width - 1 - name_full - len(_GAP)
        )
        rest = sum(widths) + len(_GAP) * (len(cols) - 1)
        room = width - 1 - rest
        squeezed = cols[flex].flex == "shorten" and name_full > room
        if room < min(MIN_NAME, name_full) or (squeezed and width < STACK_BELOW):
            return None
        widths[flex] = min(name_full, room)
    out = _header(cols, widths, " ")
    out.append(Text(" " + "─" * (sum(widths) + len(_GAP) * (len(cols) - 1)), style="dim"))
    for n, row in enumerate(table.rows):
        cells = [_cell(row[i], widths[i], cols[i]) for i in range(len(cols))]
        out += _join(cells, widths, " ", "bold" if n in table.bold_rows else "")
    return out


def _stacked(table: TableText, width: int, flex: int) -> list[Text]:
    """Each row's name on its own line, its values on the next, under one header."""
    cols = table.columns
    keep = [i for i in range(len(cols)) if i != flex]
    sub = TableText(
        tuple(cols[i] for i in keep), tuple(tuple(r[i] for i in keep) for r in table.rows)
    )
    widths = _fixed_widths(sub, None, width - 3)
    out = [Text(" " + cols[flex].header, style="bold")] if cols[flex].header else []
    out += _header(sub.columns, widths, "   ")
    out.append(Text("   " + "─" * (sum(widths) + len(_GAP) * (len(keep) - 1)), style="dim"))
    for n, row in enumerate(table.rows):
        style = "bold" if n in table.bold_rows else ""
        if cols[flex].flex == "wrap":
            out += [Text(" " + x, style=style) for x in _wrap(row[flex], width - 1)]
        else:
            out.append(Text(" " + middle(row[flex], width - 1), style=style))
        values = [_cell(v, w, c) for v, w, c in zip(sub.rows[n], widths, sub.columns, strict=True)]
        out += _join(values, widths, "   ", style)
    return out


def _header(cols: Sequence[Column], widths: Sequence[int], indent: str) -> list[Text]:
    """Header lines, each header wrapped at its spaces to its column, bottom-aligned."""
    parts = [_wrap(c.header, w) if w else [""] for c, w in zip(cols, widths, strict=True)]
    depth = max(len(p) for p in parts)
    cells = [[""] * (depth - len(p)) + p for p in parts]
    padded = [
        [_pad(x, w, c.right) for x in cell] for cell, c, w in zip(cells, cols, widths, strict=True)
    ]
    return [
        Text(indent + _GAP.join(p[k] for p in padded).rstrip(), style="bold") for k in range(depth)
    ]


def _pad(text: str, width: int, right: bool) -> str:
    """``text`` padded with spaces to ``width`` terminal cells."""
    fill = " " * max(width - cell_len(text), 0)
    return fill + text if right else text + fill


def _wrap(text: str, width: int) -> list[str]:
    """``text`` wrapped at spaces to ``width``; a word longer than the width stays whole, and so
    does a number with its unit (a no-break space in ``text`` also holds its neighbours)."""
    held = _NUMBER_SPACE.sub("\\1\u00a0", text)
    got = textwrap.wrap(held, max(width, 1), break_long_words=False, break_on_hyphens=False)
    return [x.replace("\u00a0", " ") for x in got] or [""]


def _longest(value: str) -> int:
    """The width of a cell's longest line."""
    return max(cell_len(x) for x in value.split("\n"))


def _cell(value: str, width: int, col: Column) -> list[str]:
    """A cell's lines, padded to ``width``."""
    if col.flex == "shorten":
        got = [middle(value, width)]
    elif col.flex == "wrap":
        got = _wrap(value, width)
    else:
        got = [part for x in value.split("\n") for part in _wrap(x, width)]
    return [_pad(x, width, col.right) for x in got]


def _join(cells: Sequence[list[str]], widths: Sequence[int], indent: str, style: str) -> list[Text]:
    """Cells side by side; a cell of several lines (a wrapped name) makes several lines."""
    depth = max(len(c) for c in cells)
    out = []
    for k in range(depth):
        parts = [c[k] if k < len(c) else " " * w for c, w in zip(cells, widths, strict=True)]
        out.append(Text(indent + _GAP.join(parts).rstrip(), style=style))
    return out


def fit(text: str, width: int | None, code_indent: int | None = 6) -> str:
    """Prose lines of ``text`` wrapped at their spaces to ``width`` (None: as they are), each
    continuation indented two past its line's own indent; a number keeps its unit, and a word
    longer than the width stays whole. Lines of code (a ``fix:`` line, or indented
    ``code_indent`` or more; None: no line is code) are left whole: code pasted from a report
    must not break."""
    if width is None:
        return text
    out = []
    for line in text.split("\n"):
        indent = len(line) - len(line.lstrip(" "))
        code = code_indent is not None and (indent >= code_indent or "fix: " in line)
        if cell_len(line) <= width or code:
            out.append(line)
            continue
        pad = " " * indent
        held = _NUMBER_SPACE.sub("\\1\u00a0", line[indent:])
        got = textwrap.wrap(
            held,
            max(width, 20),
            initial_indent=pad,
            subsequent_indent=pad + "  ",
            break_long_words=False,
            break_on_hyphens=False,
        )
        out += [x.replace("\u00a0", " ") for x in got] or [line]
    return "\n".join(out)


def wrap_words(text: str, width: int) -> list[str]:
    """``text`` wrapped at its spaces to ``width`` (at least 10): a number keeps its unit, a
    word longer than the width stays whole."""
    return _wrap(text, max(width, 10))
