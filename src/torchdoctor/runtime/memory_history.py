"""Opt-in allocation history on CUDA: stacks for every allocation, a snapshot and its analysis on OOM.

``Runtime(memory_history=True)`` (or a folder for the snapshot) turns this on. Recording costs a
Python stack walk per allocation, so it is off by default. When the caching allocator runs out of
memory it calls its OOM observers before raising; ours dumps the snapshot there (the moment of the
failure, with the ``oom`` entry in the history) and logs what ``torchdoctor memory`` finds in it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from torchdoctor.runtime.log import logger

MAX_ENTRIES = (
    200_000  # about 100-200 MB of snapshot with Python stacks; the last N entries are kept
)
SNAPSHOT_NAME = "memory_snapshot_oom.pickle"


class MemoryHistory:
    """Records allocation history on one CUDA device and analyses the snapshot dumped at OOM."""

    def __init__(
        self, device: torch.device, folder: str | Path = ".", max_entries: int = MAX_ENTRIES
    ) -> None:
        self.device = device
        self.folder = Path(folder)
        self.max_entries = max_entries
        self.recording = False
        self.snapshot_path: Path | None = None
        self.headline: dict[str, Any] | None = None

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
        self.recording = True
        return True

    def _on_oom(
        self, device: int, alloc_bytes: int, device_allocated_bytes: int, device_free_bytes: int
    ) -> None:
        # Called inside the allocator: never raise from here, or the real OOM error is lost.
        try:
            self.dump()
        except Exception as exc:
            logger.warning("memory history: could not dump the OOM snapshot: %s", exc)

    def dump(self) -> Path:
        """Write the snapshot, analyse it and log the headline; returns the snapshot's path."""
        from torchdoctor.memory.headline import snapshot_headline

        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / SNAPSHOT_NAME
        torch.cuda.memory._dump_snapshot(str(path))
        self.snapshot_path = path
        self.headline = snapshot_headline(path)
        logger.warning("out of memory: %s", self.headline["text"])
        return path

    def stop(self) -> None:
        if self.recording:
            torch.cuda.memory._record_memory_history(enabled=None)
            self.recording = False
