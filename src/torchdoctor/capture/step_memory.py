"""The process's memory at the end of every step: resident memory (``/proc/self/statm``) and,
once the script itself initialised CUDA, the caching allocator's allocated bytes.

Read on every step's path (the evidence log's step line, ``capture/evidence.py``), so it costs
one ``pread`` of a file kept open and, on CUDA, one read of the allocator's counter: a few
microseconds, no allocation on the device, no synchronisation. CUDA is never initialised here:
a script that has not touched it gets no device column.
"""

from __future__ import annotations

import contextlib
import os
import sys
from array import array
from typing import Any

UNKNOWN = -1
"""A value that could not be read (no ``/proc``, CUDA not in use)."""


class StepMemory:
    """Memory after each step, in bytes; index ``i`` is the end of step ``i + 1``."""

    def __init__(self) -> None:
        self.rss_bytes = array("q")
        self.cuda_bytes = array("q")
        self.pid = os.getpid()
        self._fd = -1
        self._page = 4096
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self._page = os.sysconf("SC_PAGE_SIZE")
            self._fd = os.open("/proc/self/statm", os.O_RDONLY)

    def _rss(self) -> int:
        if self._fd < 0:
            return UNKNOWN
        try:  # statm: size resident shared ... (pages); the file stays open, read from 0
            return int(os.pread(self._fd, 96, 0).split()[1]) * self._page
        except (OSError, ValueError, IndexError):
            return UNKNOWN

    @staticmethod
    def _cuda() -> int:
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        try:  # is_initialized reads a flag: it never starts CUDA
            if cuda is not None and cuda.is_initialized():
                return int(cuda.memory_allocated())
        except Exception:
            return UNKNOWN
        return UNKNOWN

    def sample(self) -> tuple[int, int]:
        """Read and keep both values (``UNKNOWN`` where unreadable); nothing in a forked child."""
        if os.getpid() != self.pid:
            return UNKNOWN, UNKNOWN
        rss, cuda = self._rss(), self._cuda()
        self.rss_bytes.append(rss)
        self.cuda_bytes.append(cuda)
        return rss, cuda

    def restart(self) -> None:
        """Counting restarted on a stronger step signal: the steps so far were other steps."""
        self.rss_bytes = array("q")
        self.cuda_bytes = array("q")

    def close(self) -> None:
        if self._fd >= 0 and os.getpid() == self.pid:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = -1

    def record(self) -> dict[str, Any]:
        """``run.json``'s ``memory_steps``: the columns (None where never readable) and the
        host's available memory now."""
        from torchdoctor.capture.monitor import available_bytes

        return steps_record(list(self.rss_bytes), list(self.cuda_bytes), available_bytes())


def steps_record(
    rss: list[int], cuda: list[int], available: int | None, device_total: int | None = None
) -> dict[str, Any]:
    """The ``memory_steps`` section from the columns (shared with the record rebuilt from the
    evidence log of a process that died)."""
    return {
        "rss_bytes": rss if any(v >= 0 for v in rss) else None,
        "cuda_allocated_bytes": cuda if any(v >= 0 for v in cuda) else None,
        "available_bytes": available,
        "device_total_bytes": device_total,
    }
