"""Writing ``run.json``: the one place its header and its steps section are built.

Two writers make a run record: the watched process when the script ends
(``capture/session.py``), and the watching parent when that process died before writing its own
(``capture/evidence.py``, from the steps it logged as they happened). Both build the document
here, so the two cannot drift apart: the same keys, in the same order, with the same statistics
(the median and the mean over the measured steps, computed by ``record/run.py``'s
``StepStats.measure``, the one steps type both ways). Under torchrun, rank 0's combined
``run.json`` is an index of the ranks' records (``rank_index``). ``record/run.py`` and
``record/folder.py`` read what is written here.

The sections the watchers fill (``compile``, ``config``, ``syncs``, ``gpu``, ...) are passed in
as they are; each watcher owns its section's contents.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchdoctor._version import __version__
from torchdoctor.record import layout

if TYPE_CHECKING:
    from torchdoctor.record.run import StepStats


@dataclass(frozen=True)
class RankPlace:
    """Where the process ran under torchrun (0, 0, 1 for one process)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    def to_dict(self) -> dict[str, int]:
        return {"rank": self.rank, "local_rank": self.local_rank, "world_size": self.world_size}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> RankPlace:
        d = d or {}
        return cls(
            int(d.get("rank") or 0), int(d.get("local_rank") or 0), int(d.get("world_size") or 1)
        )


@dataclass(frozen=True)
class RunHeader:
    """What ran, where, when and how it ended: the record's first keys."""

    script: str
    argv: Sequence[str]
    options: Mapping[str, Any]
    """``CheckOptions.to_dict()`` as the run used them."""
    rank: RankPlace
    exit: Mapping[str, Any]
    """``{"status": ...}`` and, for an exception or a signal, what it was."""
    started_unix_s: float | None
    torch_version: str | None

    def to_dict(self, now_unix_s: float | None = None) -> dict[str, Any]:
        now = time.time() if now_unix_s is None else now_unix_s
        return {
            "schema": layout.RUN_SCHEMA,
            "schema_version": layout.RUN_SCHEMA_VERSION,
            "torchdoctor_version": __version__,
            "torch_version": self.torch_version,
            "python_version": platform.python_version(),
            "platform": platform.platform(),
            "script": self.script,
            "argv": list(self.argv),
            "started_unix_s": self.started_unix_s,
            "wall_s": now - (self.started_unix_s if self.started_unix_s is not None else now),
            "options": dict(self.options),
            "rank": self.rank.to_dict(),
            "exit": dict(self.exit),
        }


def run_document(
    header: RunHeader, steps: StepStats, sections: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``run.json`` document: the header, the steps, then the watchers' sections in order.

    A section may not reuse a header or steps key (that would silently replace what was
    recorded): ValueError names it.
    """
    head = header.to_dict()
    clash = sorted(set(sections) & (set(head) | {"steps"}))
    if clash:
        raise ValueError(f"a run record section reuses a reserved key: {', '.join(clash)}")
    return {**head, "steps": steps.to_dict(), **sections}


def rank_index(world_size: int, ranks: Sequence[int]) -> dict[str, Any]:
    """The combined ``run.json`` rank 0 writes under torchrun: where each rank's record is
    (``ranks/rank<R>.json``, relative to the folder) and which ranks wrote none."""
    present = sorted(set(ranks))
    return {
        "schema": layout.RUN_SCHEMA,
        "schema_version": layout.RUN_SCHEMA_VERSION,
        "world_size": world_size,
        "ranks": {str(r): str(layout.rank_record(Path(), r)) for r in present},
        "missing_ranks": [r for r in range(world_size) if r not in present],
    }
