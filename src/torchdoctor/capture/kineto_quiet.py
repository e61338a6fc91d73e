"""Keep Kineto's own progress lines (``USDT: ... profiler_start``, ``STAGE: ... Warm Up``) off
the script's standard error.

libkineto writes them from C++ straight to file descriptor 2 whenever a profiling session
starts or stops, whatever ``KINETO_LOG_LEVEL`` says. Around our own profiler calls the
descriptor points at a temporary file; afterwards every other line is written back, in order.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

_NOISE = re.compile(rb"^(USDT|STAGE):\S+ \S+ \d+:\d+ \S+\.cpp:\d+\] ")


@contextlib.contextmanager
def kineto_quiet() -> Iterator[None]:
    """Run the body with fd 2 captured, then pass on everything but Kineto's noise."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no real descriptor 2 (embedded, Windows)
        yield
        return
    with tempfile.TemporaryFile() as capture:
        try:
            os.dup2(capture.fileno(), 2)
        except OSError:
            os.close(saved)
            yield
            return
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [ln for ln in capture.read().splitlines(keepends=True) if not _NOISE.match(ln)]
            if kept:
                with contextlib.suppress(OSError):
                    os.write(2, b"".join(kept))
