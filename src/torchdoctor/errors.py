"""Errors that the CLI turns into one line and an exit status."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user (a file, a flag, a config): one line, exit status 2."""

    exit_code = 2


class OutputError(UserError):
    """An output that could not be written when it was (a full disk, a quota, an I/O error):
    the user's environment, not a bad input and not a torchdoctor bug. One line naming the
    output, exit status 74 (``EX_IOERR`` of sysexits.h; ``torchdoctor.exits.EXIT_OUTPUT``)."""

    exit_code = 74


class TraceError(UserError):
    """A trace file that cannot be read as a Kineto / Chrome trace."""
