"""Writing ``run.json``: the one place its header and its steps section are built.

Two writers make a run record: the watched process when the script ends
(``capture/session.py``), and the watching parent when that process died before writing its own
(``capture/evidence.py``, from the steps it logged as they happened). Both build the document
here, so the two cannot drift apart: the same keys, in the same order, with the same statistics
(the median and the mean over the measured steps). Under torchrun, rank 0's combined
``run.json`` is an index of the ranks' records (``rank_index``). ``record/run.py`` and
``record/folder.py`` read what is written here.

The sections the watchers fill (``compile``, ``config``, ``syncs``, ``gpu``, ...) are passed in
as they are; each watcher owns its section's contents.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from torchdoctor._version import __version__
from torchdoctor.record import layout


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


@dataclass(frozen=True)
class StepTimes:
    """Every step's wall time and data wait, and which of them count as measured."""

    source: str | None
    """The step signal: ``dataloader``, ``optimizer``, ``marker``..."""
    step_ms: Sequence[float]
    data_wait_ms: Sequence[float]
    warmup_steps: int
    window: Sequence[int] | None = None
    """The profiled window's first and last step (1-based), None when none opened."""
    profiled_steps: int = 0
    measured_end: int | None = None
    """Steps from this index on are check's own mode measurements, not the script's (None: all)."""
    signal_switches: Sequence[Any] = ()
    experiment_steps: int = 0
    own_steps: Sequence[int] = ()
    clock_errors: Sequence[Any] = field(default_factory=list)
    other_thread_steps: int = 0
    """Step signals that came from a thread other than the script's main one (not counted)."""
    schedule: Mapping[str, Any] | None = None
    """Which steps were warm-up, clean, profiled and after (``Schedule.to_dict()``)."""
    timed: Mapping[str, Any] = field(default_factory=dict)
    """The windows timed by their boundaries alone: ``clean``, ``after`` and, on a GPU, the
    kernel window (``kernels``, with its GPU activity summary)."""

    def to_dict(self) -> dict[str, Any]:
        step_ms, wait_ms = list(self.step_ms), list(self.data_wait_ms)
        measured = step_ms[self.warmup_steps : self.measured_end]
        measured_wait = wait_ms[self.warmup_steps : self.measured_end]
        n = len(measured)
        return {
            "source": self.source,
            "count": len(step_ms),
            "warmup_steps": min(self.warmup_steps, len(step_ms)),
            "window": list(self.window) if self.window else None,
            "profiled_steps": self.profiled_steps,
            "step_ms": step_ms,
            "data_wait_ms": wait_ms,
            "measured_steps": n,
            "median_step_ms": median(measured) if measured else None,
            "mean_step_ms": sum(measured) / n if n else None,
            "mean_data_wait_ms": sum(measured_wait) / n if n else None,
            "signal_switches": list(self.signal_switches),
            "experiment_steps": self.experiment_steps,
            "own_steps": list(self.own_steps),
            "clock_errors": list(self.clock_errors),
            "other_thread_steps": self.other_thread_steps,
            "schedule": dict(self.schedule) if self.schedule else None,
            "clean": self.timed.get("clean"),
            "after": self.timed.get("after"),
            "kernels": self.timed.get("kernels"),
        }


def run_document(
    header: RunHeader, steps: StepTimes, sections: Mapping[str, Any]
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
