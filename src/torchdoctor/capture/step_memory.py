"""The process's memory at the end of every step: resident memory (``/proc/self/statm``), the
bytes malloc has handed out and not had back (glibc's ``mallinfo2``: CPU tensors live there)
and, once the script itself initialised CUDA, the caching allocator's allocated bytes.

Resident memory alone misreads both ways: freed memory that malloc keeps takes a leak's first
hundreds of MiB without a page more (logits kept every step grew it in lumps, flat for three
steps after the profiler freed its buffers), and a heap that fragments creeps up with no leak
(a healthy transformer: 2.7 MiB per step). What malloc has in use moves by exactly what is kept.

Read on every step's path (the evidence log's step line, ``capture/evidence.py``): one ``pread``
of a file kept open, one ``mallinfo2`` call (about 13 us here) and, on CUDA, one read of the
allocator's counter; no allocation on the device, no synchronisation. CUDA is never initialised
here: a script that has not touched it gets no device column.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from array import array
from typing import Any

UNKNOWN = -1
"""A value that could not be read (no ``/proc``, CUDA not in use)."""


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mallinfo2() -> Any:
    """glibc's ``mallinfo2`` (2.33 and later), None elsewhere."""
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    fn.argtypes = []
    return fn


class StepMemory:
    """Memory after each step, in bytes; index ``i`` is the end of step ``i + 1``."""

    def __init__(self) -> None:
        self.rss_bytes = array("q")
        self.cuda_bytes = array("q")
        self.heap_bytes = array("q")
        self.pid = os.getpid()
        self._mallinfo = _mallinfo2()
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

    def _heap(self) -> int:
        if self._mallinfo is None:
            return UNKNOWN
        try:  # in use: from the heap's arenas, and mmapped chunks (large tensors)
            info = self._mallinfo()
            return int(info.uordblks + info.hblkhd)
        except Exception:
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

    def sample(self) -> tuple[int, int, int]:
        """Read and keep resident, CUDA-allocated and heap-in-use bytes (``UNKNOWN`` where
        unreadable); nothing in a forked child."""
        if os.getpid() != self.pid:
            return UNKNOWN, UNKNOWN, UNKNOWN
        rss, cuda, heap = self._rss(), self._cuda(), self._heap()
        self.rss_bytes.append(rss)
        self.cuda_bytes.append(cuda)
        self.heap_bytes.append(heap)
        return rss, cuda, heap

    def restart(self) -> None:
        """Counting restarted on a stronger step signal: the steps so far were other steps."""
        self.rss_bytes = array("q")
        self.cuda_bytes = array("q")
        self.heap_bytes = array("q")

    def close(self) -> None:
        if self._fd >= 0 and os.getpid() == self.pid:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = -1

    def record(self) -> dict[str, Any]:
        """``run.json``'s ``memory_steps``: the columns (None where never readable) and the
        host's available memory now."""
        from torchdoctor.capture.monitor import available_bytes

        return steps_record(
            list(self.rss_bytes), list(self.cuda_bytes), available_bytes(), list(self.heap_bytes)
        )


def steps_record(
    rss: list[int],
    cuda: list[int],
    available: int | None,
    heap: list[int] | None = None,
    device_total: int | None = None,
) -> dict[str, Any]:
    """The ``memory_steps`` section from the columns (shared with the record rebuilt from the
    evidence log of a process that died)."""
    heap = heap or []
    return {
        "rss_bytes": rss if any(v >= 0 for v in rss) else None,
        "heap_bytes": heap if any(v >= 0 for v in heap) else None,
        "cuda_allocated_bytes": cuda if any(v >= 0 for v in cuda) else None,
        "available_bytes": available,
        "device_total_bytes": device_total,
    }
