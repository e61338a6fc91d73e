"""Make text from files inert before it reaches a terminal.

Kernel, operator, annotation and file names come from files written on other machines. A name
holding ``ESC ] 0 ;`` sets a terminal's window title, ``ESC [ 2 J`` clears it, ``ESC ] 52``
writes the clipboard. Every C0 and C1 control character (and DEL) is shown as a visible escape
(``\\x1b``) instead, and so are the Unicode bidirectional overrides, which reorder what a reader
sees. JSON output is not passed through here: it escapes control characters itself and keeps
every name exact.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult

_BIDI = "\u202a-\u202e\u2066-\u2069"
# Patterns as text: ``re`` compiles (and caches) them at their first use, not at start-up (every
# command imports this module; most never print a name from a file).
_IN_FIELD = f"[\x00-\x1f\x7f-\x9f{_BIDI}]"
# A whole report keeps its own line feeds and tabs.
_IN_REPORT = f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]"


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean_field(text: str) -> str:
    """``text`` with every control character (line breaks included) as a visible escape."""
    return re.sub(_IN_FIELD, _escape, text) if re.search(_IN_FIELD, text) else text


def clean_report(text: str) -> str:
    """``text`` with every control character but line feeds and tabs as a visible escape."""
    return re.sub(_IN_REPORT, _escape, text) if re.search(_IN_REPORT, text) else text


class _Clean:
    """A renderable drawn as ``inner`` is, with the text of its segments made inert."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.segment import Segment

        for seg in console.render(self.inner, options):
            # Control segments are rich's own cursor moves; only text can come from a file.
            if seg.control or not re.search(_IN_REPORT, seg.text):
                yield seg
            else:
                yield Segment(clean_report(seg.text), seg.style)


def inert(console: Console) -> Console:
    """``console`` with a render hook that escapes control characters in all it prints."""
    from rich.console import RenderHook

    class _CleanHook(RenderHook):
        """Wraps everything printed in ``_Clean``."""

        def process_renderables(self, renderables: list[Any]) -> list[Any]:
            return [_Clean(r) for r in renderables]

    console.push_render_hook(_CleanHook())
    return console
