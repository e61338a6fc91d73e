"""The run folder ``torchdoctor-runs/<script>-<time>/``: every file name in one place.

One process::

    run.json          the run record (steps, settings seen, run-level findings)
    trace.json.gz     the profiled steps' trace
    report.json       the merged report (rank 0)        report.txt   as printed
    steps.log         evidence written as the run goes (a crash still leaves a report)
    memory_snapshot.pickle   with ``check --memory`` on a GPU

Under torchrun each rank writes ``ranks/rank<R>.json``, ``ranks/rank<R>.steps.log`` and
``traces/rank<R>.json.gz``; rank 0 then writes the combined ``run.json`` and the report.
"""

from __future__ import annotations

from pathlib import Path

RUN_SCHEMA = "torchdoctor.run"
RUN_SCHEMA_VERSION = 1

RUN = "run.json"
REPORT_JSON = "report.json"
REPORT_TEXT = "report.txt"
TRACE = "trace.json.gz"
STEPS_LOG = "steps.log"
RANKS = "ranks"
TRACES = "traces"
SNAPSHOT = "memory_snapshot.pickle"


def run_file(folder: Path) -> Path:
    """The run record (rank 0's combined one under torchrun)."""
    return folder / RUN


def is_run_folder(path: Path) -> bool:
    """A folder ``check`` wrote (it holds ``run.json``)."""
    return (path / RUN).is_file()


def rank_record(folder: Path, rank: int) -> Path:
    """One rank's own record under torchrun."""
    return folder / RANKS / f"rank{rank}.json"


def record_file(folder: Path, rank: int, distributed: bool) -> Path:
    """Where a process writes its ``run.json``-shaped record."""
    return rank_record(folder, rank) if distributed else folder / RUN


def trace_file(folder: Path, rank: int, distributed: bool) -> Path:
    """Where a process writes its trace (one folder of per-rank traces under torchrun)."""
    return folder / TRACES / f"rank{rank}.json.gz" if distributed else folder / TRACE


def steps_log(folder: Path, rank: int, distributed: bool) -> Path:
    """Where a process writes its evidence as the run goes."""
    return folder / RANKS / f"rank{rank}.steps.log" if distributed else folder / STEPS_LOG


def snapshot_name(rank: int | None = None) -> str:
    """The memory snapshot's file name: ranks of one job share the run folder."""
    return SNAPSHOT if rank is None else f"memory_snapshot_rank{rank}.pickle"


def traces_of(folder: Path) -> Path | None:
    """The trace file or the folder of rank traces in a run folder, if it holds one."""
    for candidate in (folder / TRACES, folder / TRACE, folder / "trace.json"):
        if candidate.exists():
            return candidate
    return None


def report_json(folder: Path) -> Path:
    return folder / REPORT_JSON


def report_text(folder: Path) -> Path:
    return folder / REPORT_TEXT
