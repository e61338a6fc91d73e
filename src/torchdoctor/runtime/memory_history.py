"""Opt-in allocation history on CUDA: stacks for every allocation, a snapshot and its analysis on OOM.

``Runtime(memory_history=True)`` (or a folder for the snapshot) turns this on. Recording costs a
Python stack walk per allocation, so it is off by default. When the caching allocator runs out of
memory it calls its OOM observers before raising; ours writes the snapshot there (the moment of
the failure, with the ``oom`` entry in the history) and nothing more. The analysis, which reads
the whole snapshot back, runs later, outside the allocator: at the next optimizer step (an OOM
the script caught), at ``stop()``, or when the process exits (an OOM that ended it).

Libraries catch OOMs on purpose (cuDNN retries with a smaller workspace, a batch-size search
halves the batch), so the observer writes at most ``max_dumps`` snapshots and only counts the
rest. torch cannot detach an observer: ``stop()`` makes ours a no-op.
"""

from __future__ import annotations

import atexit
from pathlib import Path
from typing import Any

import torch

from torchdoctor.runtime.log import logger

MAX_ENTRIES = (
    200_000  # about 100-200 MB of snapshot with Python stacks; the last N entries are kept
)
SNAPSHOT_NAME = "memory_snapshot_oom.pickle"
MAX_DUMPS = 3
"""Snapshots written per run (each overwrites the last): the first OOMs of a retry loop are
seen without paying a full snapshot at every retry."""
_KEPT_EVENTS = 16


class MemoryHistory:
    """Records allocation history on one CUDA device and analyses the snapshot dumped at OOM."""

    def __init__(
        self,
        device: torch.device,
        folder: str | Path = ".",
        max_entries: int = MAX_ENTRIES,
        max_dumps: int = MAX_DUMPS,
    ) -> None:
        self.device = device
        self.folder = Path(folder)
        self.max_entries = max_entries
        self.max_dumps = max_dumps
        self.recording = False
        self.observing = False
        """Whether the OOM observer acts (False before ``start`` and after ``stop``)."""
        self.observed_ooms = 0
        """OOMs the allocator reported while observing, caught or not."""
        self.ooms: list[dict[str, int]] = []
        """The first OOMs' numbers, as the allocator passed them."""
        self.dumps = 0
        self.snapshot_path: Path | None = None
        self.headline: dict[str, Any] | None = None
        self.error: str | None = None
        self._pending = False

    def start(self) -> bool:
        """Start recording (True), or say why not: only CUDA's caching allocator keeps a history."""
        if self.device.type != "cuda" or not torch.cuda.is_available():
            logger.info("memory history: not recorded on %s (CUDA only)", self.device)
            return False
        torch.cuda.memory._record_memory_history(
            enabled="all", stacks="python", max_entries=self.max_entries
        )
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is not None:
            attach(self._on_oom)
            self.observing = True
            atexit.register(self.report)  # an OOM that ends the program is analysed at exit
        self.recording = True
        return True

    @property
    def pending(self) -> bool:
        """A snapshot was written at an OOM and not analysed yet."""
        return self._pending

    def _on_oom(
        self, device: int, alloc_bytes: int, device_limit_bytes: int, device_free_bytes: int
    ) -> None:
        # The caching allocator's arguments (c10/cuda/CUDACachingAllocator.cpp): the device, the
        # request, the memory the process may use (the device's total, or the per-process
        # fraction's limit) and the free memory the driver reports. Called inside the allocator:
        # never raise from here, or the real OOM error is lost; only write the snapshot.
        if not self.observing:
            return
        self.observed_ooms += 1
        if len(self.ooms) < _KEPT_EVENTS:
            self.ooms.append(
                {
                    "device": int(device),
                    "tried_bytes": int(alloc_bytes),
                    "device_limit_bytes": int(device_limit_bytes),
                    "device_free_bytes": int(device_free_bytes),
                }
            )
        if self.dumps >= self.max_dumps:
            return
        try:
            self._write()
            self.dumps += 1
            self._pending = True
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            logger.warning("memory history: could not dump the OOM snapshot: %s", exc)

    def _write(self) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / SNAPSHOT_NAME
        torch.cuda.memory._dump_snapshot(str(path))
        self.snapshot_path = path
        return path

    def report(self) -> dict[str, Any] | None:
        """Analyse the snapshot written at the last OOM, if not done yet, and log its headline;
        returns the headline (None when no OOM snapshot was written). Never raises."""
        if not self._pending or self.snapshot_path is None:
            return self.headline
        self._pending = False
        try:
            from torchdoctor.memory.headline import snapshot_headline

            self.headline = snapshot_headline(self.snapshot_path)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            logger.warning("memory history: could not analyse %s: %s", self.snapshot_path, exc)
            return None
        logger.warning("out of memory: %s", self.headline["text"])
        return self.headline

    def dump(self) -> Path:
        """Write a snapshot now, analyse it and log the headline; returns the snapshot's path."""
        path = self._write()
        self._pending = True
        self.report()
        return path

    def stop(self) -> None:
        """Stop observing OOMs and recording, after analysing a snapshot still pending."""
        self.observing = False
        self.report()
        atexit.unregister(self.report)
        if self.recording:
            torch.cuda.memory._record_memory_history(enabled=None)
            self.recording = False

    def record(self) -> dict[str, Any]:
        """What was observed: OOM count, the first OOMs' numbers, snapshots written, the file."""
        return {
            "observed_ooms": self.observed_ooms,
            "ooms": list(self.ooms),
            "dumps": self.dumps,
            "snapshot_file": None if self.snapshot_path is None else str(self.snapshot_path),
            "analysed": self.headline is not None,
            "error": self.error,
        }
