"""Writing ``run.json``: the one place its header and its steps section are built.

Two writers make a run record: the watched process when the script ends
(``capture/session.py``), and the watching parent when that process died before writing its own
(``capture/evidence.py``, from the steps it logged as they happened). Both build the document
here, so the two cannot drift apart: the same keys, in the same order, with the same statistics
(the median and the mean over the measured steps, computed by ``record/run.py``'s
``StepStats.measure``, the one steps type both ways). Under torchrun, rank 0's combined
``run.json`` is an index of the ranks' records (``rank_index``). ``record/run.py`` and
``record/folder.py`` read what is written here.

The sections the watchers fill (``compile``, ``config``, ``syncs``, ``gpu``, ``modes``, ...) are
handed over as they are, the typed ones (``record/run.py``, ``record/rows.py``,
``record/account.py``) built in code, and written here once by ``record/typed.py``'s
``recorded``; each watcher owns its section's contents. What the end of a check run adds after
the script (``capture/runner.py``: the trace, the OOM, the memory per step, the findings) comes
as parts too (``RunEnd``, ``ended_document``), and the sites torchdoctor's own frames left in
the sections come out of a copy (``without_sites``): the record is built, never changed in place.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchdoctor._version import __version__
from torchdoctor.record import layout
from torchdoctor.record.typed import recorded
from torchdoctor.record.values import as_dict, as_int

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
    def from_dict(cls, d: Any) -> RankPlace:
        """The place as recorded; a missing or malformed value reads as one process's."""
        rank, local, world = (
            as_int(as_dict(d).get(k)) for k in ("rank", "local_rank", "world_size")
        )
        return cls(rank or 0, local or 0, world or 1)


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
    """The ``run.json`` document: the header, the steps, then the watchers' sections in order,
    as plain data (``recorded``: a typed row as the record writes it; nothing shared with the
    watchers' own state).

    A section may not reuse a header or steps key (that would silently replace what was
    recorded): ValueError names it.
    """
    head = header.to_dict()
    clash = sorted(set(sections) & (set(head) | {"steps"}))
    if clash:
        raise ValueError(f"a run record section reuses a reserved key: {', '.join(clash)}")
    return {**head, "steps": steps.to_dict(), **recorded(dict(sections))}


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


@dataclass(frozen=True)
class RunEnd:
    """What the end of a check run adds to the watchers' record, once the script is over."""

    trace: str | None
    """The trace file, relative to the run folder; None when none was written."""
    oom: Mapping[str, Any] | None = None
    """The out-of-memory error that ended the script (``oom``), when one did."""
    oom_observer: Mapping[str, Any] | None = None
    """OOMs the script caught itself (``gpu.oom_observer``); kept only where there is a GPU
    section."""
    memory_steps: Mapping[str, Any] | None = None
    """Memory at each step's end (``memory_steps``), when it was recorded."""


def ended_document(
    document: Mapping[str, Any],
    end: RunEnd,
    findings: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A new ``run.json`` document: ``document`` (left as it is) with ``end``'s parts and, when
    given, the run-level ``findings`` as dicts. A key ``document`` has keeps its place."""
    out = dict(document)
    out["trace"] = end.trace
    if end.oom is not None:
        out["oom"] = dict(end.oom)
    gpu = out.get("gpu")
    if end.oom_observer is not None and isinstance(gpu, Mapping):
        out["gpu"] = {**gpu, "oom_observer": dict(end.oom_observer)}
    if end.memory_steps is not None:
        out["memory_steps"] = dict(end.memory_steps)
    if findings is not None:
        out["findings"] = [dict(f) for f in findings]
    return out


# (section, list, key of the site in each row): the lists of call sites the watchers record
SITE_LISTS = (
    ("compile", "graph_breaks", "site"),
    ("compile", "recompile_events", "site"),
    ("compile", "recompile_limit_hits", "site"),
    ("syncs", "host_syncs", "site"),
    ("syncs", "unpinned_non_blocking", "site"),
    ("syncs", "sync_debug", "site"),
)


def without_sites(
    document: Mapping[str, Any], drop: Callable[[Any], bool], keep: int = 20
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """A copy of ``document`` without the rows of ``SITE_LISTS`` whose site ``drop`` says, and
    without the ``call`` of a data loader built at such a site; ``document`` is left as it is.

    Also returns what was removed, by ``section.list`` (the first ``keep`` sites of each list;
    every loader's), empty when nothing was.
    """
    out = dict(document)
    removed: dict[str, list[str]] = {}
    for section, name, key in SITE_LISTS:
        part = out.get(section) or {}
        rows = part.get(name)
        if not rows:
            continue
        kept, dropped = [], []
        for row in rows:
            if drop(row.get(key)):
                dropped.append(str(row.get(key)))
            else:
                kept.append(row)
        out[section] = {**part, name: kept}
        if dropped:
            removed[f"{section}.{name}"] = dropped[:keep]
    config = out.get("config") or {}
    loaders = config.get("dataloaders") or []
    if any(drop((loader.get("call") or {}).get("site")) for loader in loaders):
        rebuilt = []
        for loader in loaders:
            site = (loader.get("call") or {}).get("site")
            if drop(site):
                removed.setdefault("config.dataloaders", []).append(str(site))
                loader = {k: v for k, v in loader.items() if k != "call"}
            rebuilt.append(loader)
        out["config"] = {**config, "dataloaders": rebuilt}
    return out, removed
