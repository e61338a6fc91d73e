"""Housekeeping calls inside the training loop: ``torch.save`` (checkpoints) and
``gc.collect()`` (a full garbage collection), timed at the user's line.

Neither is training work, and neither shows as anything but "time outside operators" in a
trace, where it reads as framework overhead or an input pipeline. Recorded only while
``measuring`` (the steps after the warm-up), and only for calls from the user's own code.
"""

from __future__ import annotations

import functools
import gc
import sys
from time import perf_counter
from typing import Any

from torchdoctor.capture.patches import Patcher

_MAX_SITES = 32


class HousekeepingWatch:
    """Calls and seconds per (what, user line) of ``torch.save`` and ``gc.collect``."""

    def __init__(self) -> None:
        self.measuring = False
        self.calls: dict[tuple[str, str], list[float]] = {}
        self._patcher = Patcher()

    def install(self) -> None:
        """Wrap ``torch.save`` and ``gc.collect``."""
        import torch

        from torchdoctor.capture.callsource import is_library_file

        watch = self
        library = is_library_file

        def wrap(what: str, orig: Any) -> Any:
            @functools.wraps(orig)
            def call(*args: Any, **kwargs: Any) -> Any:
                if not watch.measuring:
                    return orig(*args, **kwargs)
                frame = sys._getframe(1)
                site = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                if frame.f_code.co_filename.startswith("<") or library(frame.f_code.co_filename):
                    return orig(*args, **kwargs)  # torch's or a library's own call
                t0 = perf_counter()
                try:
                    return orig(*args, **kwargs)
                finally:
                    watch._record(what, site, perf_counter() - t0)

            return call

        self._patcher.patch(torch, "save", wrap("torch.save", torch.save))
        self._patcher.patch(gc, "collect", wrap("gc.collect", gc.collect))

    def _record(self, what: str, site: str, seconds: float) -> None:
        key = (what, site)
        if key in self.calls or len(self.calls) < _MAX_SITES:
            entry = self.calls.setdefault(key, [0, 0.0])
            entry[0] += 1
            entry[1] += seconds

    def uninstall(self) -> None:
        """Restore both (idempotent)."""
        self._patcher.restore()

    def snapshot(self) -> list[dict[str, Any]]:
        """``{"what", "site", "calls", "seconds"}`` per call site, costliest first."""
        rows = [
            {"what": w, "site": s, "calls": int(c), "seconds": t}
            for (w, s), (c, t) in self.calls.items()
        ]
        return sorted(rows, key=lambda r: -r["seconds"])
