"""Send the watched script's standard output to standard error (``check --json``), so that
standard output carries nothing but the JSON report."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator


def _real_fd(stream: object) -> int | None:
    try:
        return int(stream.fileno())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None  # a captured stream (tests, notebooks): Python-level redirect only


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Inside the block, ``print`` and anything writing to file descriptor 1 (C extensions,
    DataLoader workers started with ``spawn``, subprocesses) write to standard error."""
    out_fd, err_fd = _real_fd(sys.stdout), _real_fd(sys.stderr)
    saved_fd = None
    sys.stdout.flush()
    if out_fd is not None and err_fd is not None:
        saved_fd = os.dup(out_fd)
        os.dup2(err_fd, out_fd)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        if saved_fd is not None and out_fd is not None:
            os.dup2(saved_fd, out_fd)
            os.close(saved_fd)
