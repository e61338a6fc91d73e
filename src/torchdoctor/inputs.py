"""Checks on the paths a command is given, made before anything is opened or run.

A FIFO, a terminal or a device passes ``os.path.exists`` but blocks a reader forever (or never
ends), so an input must be a regular file (or, where a command takes one, a folder); an output
must land in a folder that exists, so a run is never lost at its end for a typo in ``--html``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from torchdoctor.errors import OutputError, UserError

_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def input_path(path: str | Path, what: str = "file", folder_ok: bool = False) -> Path:
    """``path`` if it is a regular file (or a folder, with ``folder_ok``) that can be read.

    Raises UserError (exit 2) naming what is wrong: missing, a folder, a FIFO or device, or
    unreadable. Symbolic links are followed.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise UserError(f"{p}: no such {what}") from None
    except NotADirectoryError:
        raise UserError(f"{p}: no such {what} (a part of the path is not a folder)") from None
    except OSError as exc:
        raise UserError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        if folder_ok:
            return p
        raise UserError(f"{p}: is a folder, not a {what}")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{p}: is {kind_of(st.st_mode)}, not a {what}; give a regular file")
    if not os.access(p, os.R_OK):
        raise UserError(f"{p}: cannot read: permission denied")
    return p


def output_path(path: str | Path, what: str = "output") -> Path:
    """``path`` if a file can be written there: its folder exists and it is not a folder.

    Checked before the work starts, so a command never does its work and then fails to save it.
    """
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise UserError(f"cannot write the {what} to {p}: it is a folder")
    if not parent.is_dir():
        raise UserError(f"cannot write the {what} to {p}: no such folder {parent}")
    if not os.access(parent, os.W_OK):
        raise UserError(f"cannot write the {what} to {p}: {parent} is not writable")
    return p  # a pipe or a device (/dev/null, /dev/fd/N) is a fine place to write to


def absolute_path(path: str | Path, what: str = "output") -> str:
    """``path`` made absolute against the working directory now (symbolic links kept).

    Every path a command is given is resolved before the user's script runs: a script may change
    its working directory (``os.chdir``, Hydra's ``job.chdir``) and a relative path would then
    name another place. Raises UserError when the working directory itself no longer exists.
    """
    try:
        return os.path.abspath(os.fspath(path))
    except FileNotFoundError:
        raise UserError(
            f"cannot place the {what} {path}: the working directory no longer exists"
        ) from None


def write_output(path: str | Path, text: str, what: str = "output") -> Path:
    """Write ``text`` to ``path`` (UTF-8); a write that fails (a full disk, a quota, an I/O
    error) raises OutputError naming the file: one line, exit 74."""
    p = Path(path)
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise OutputError(f"cannot write the {what} to {p}: {exc.strerror or exc}") from None
    return p
