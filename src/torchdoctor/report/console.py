"""One way to make a rich console: at least 100 columns when output goes to a file or a pipe."""

from __future__ import annotations

import shutil
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def report_width(stream: Any = None) -> int | None:
    """The terminal's width on a terminal (None: let rich decide), else at least 100 columns, so
    tables written to CI logs and files are not squeezed to rich's 80-column default."""
    stream = stream or sys.stdout
    if hasattr(stream, "isatty") and stream.isatty():
        return None
    return max(100, shutil.get_terminal_size((100, 24)).columns)


def terminal_columns(stream: Any = None) -> int | None:
    """The terminal's width when ``stream`` is a terminal; None for a file, a pipe or a CI log
    (where a report keeps its lines whole and the reader's viewer wraps them)."""
    stream = stream or sys.stdout
    if hasattr(stream, "isatty") and stream.isatty():
        return shutil.get_terminal_size((100, 24)).columns
    return None


def text_width(stream: Any = None) -> int:
    """The width plain-text reports are laid out to: the terminal's on a terminal, else (a file,
    a pipe, a CI log) at least 100 columns."""
    return report_width(stream) or shutil.get_terminal_size((100, 24)).columns


def make_console(stderr: bool = False) -> Console:
    """A console for reports on stdout (or stderr), without rich's automatic highlighting.

    Control characters in what it prints are escaped (names come from files: see
    ``torchdoctor.terminal``); a closed pipe ends the process quietly (exit 141).
    """
    from rich.console import Console

    from torchdoctor.exits import broken_pipe
    from torchdoctor.terminal import inert

    console = Console(
        stderr=stderr, highlight=False, width=report_width(sys.stderr if stderr else sys.stdout)
    )
    console.on_broken_pipe = broken_pipe  # type: ignore[method-assign]
    return inert(console)
