"""Start decoding a trace in a helper process before the main process needs it.

``analyze`` calls ``prefetch`` first thing, before numpy and the analyses are imported: the helper
is forked while the main process is still small (so the main process pays few copy-on-write
faults afterwards), imports what it needs itself on the other core, and starts on the trace's
first chunks while the main process imports the rest. ``load_trace`` then takes it over (see
``torchdoctor.trace.parallel``). This module imports neither numpy nor the analyses.
"""

from __future__ import annotations

from pathlib import Path

from torchdoctor.trace import reader
from torchdoctor.trace.parallel import Helper, start_helper

CHUNK_COLUMNS = "torchdoctor.trace.columns:chunk_columns"
"""The loader's per-chunk decoder, named so the helper imports it (and numpy) itself."""
_STARTED: dict[str, Helper] = {}


def prefetch(path: str | Path) -> None:
    """Start decoding a trace file in a forked helper now, for a ``load_trace`` of it to come.

    Does nothing where a helper would not help (one CPU, a busy machine, a small file, not a
    regular file). A helper nobody takes over is stopped at exit.
    """
    p = Path(path)
    key = str(p)
    if key not in _STARTED:
        helper = _start(p)
        if helper is not None:
            import atexit

            _STARTED[key] = helper
            atexit.register(_stop_started)


def _stop_started() -> None:
    for helper in _STARTED.values():
        helper.close()
    _STARTED.clear()


def helper_for(p: Path) -> Helper | None:
    """The helper ``prefetch`` started for ``p``, else a new one (or None)."""
    started = _STARTED.pop(str(p), None)
    if started is not None:
        if started.alive:
            return started
        started.close()
    return _start(p)


def _start(p: Path) -> Helper | None:
    """A helper for a regular file of more than one chunk (a pipe cannot be read twice)."""
    size = reader.json_bytes_hint(p)
    if size is None or size <= reader.CHUNK_BYTES:
        return None
    # The helper's results (about a quarter of the JSON's bytes) go to an arena of shared memory,
    # freed page by page as they are read; past its end the main process does the rest.
    arena = min(max(size // 2, 64 << 20), 4 << 30)
    return start_helper(
        CHUNK_COLUMNS, lambda: reader.iter_json_chunks(p, reader.ReadStats()), arena
    )
