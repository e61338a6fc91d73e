"""Errors that the CLI turns into one line and an exit status."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user (a file, a flag, a config): one line, exit status 2."""

    exit_code = 2


class TraceError(UserError):
    """A trace file that cannot be read as a Kineto / Chrome trace."""
