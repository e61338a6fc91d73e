"""Analyse a folder of per-rank traces: one task per rank, cross-rank analysis on the summaries.

Each task loads one trace, analyses it and returns only its ``RankSummary`` (or why it could not),
so memory holds one trace per worker plus the summaries, whatever the number of ranks. The rank
that works longest per step (see ``analysis.cross_rank``) is then analysed once more in full for
the detailed part of the report.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, replace
from pathlib import Path

from torchdoctor.analysis.bundle import TraceAnalysis, analyze_table
from torchdoctor.analysis.cross_rank import CrossRank, FailedRank, cross_rank
from torchdoctor.analysis.rank_summary import RankSummary, summarize
from torchdoctor.commands.analyze.executors import make_executor
from torchdoctor.errors import TraceError
from torchdoctor.report.assemble import build_report
from torchdoctor.report.model import Report
from torchdoctor.rules.finding import Finding, rank_findings
from torchdoctor.rules.rank_rules import rank_rows, ranks_findings, skew_or_comm
from torchdoctor.rules.trace_rules import evaluate
from torchdoctor.trace.load import find_rank_files, load_trace

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_FINDINGS_KEPT = 5


@dataclass(frozen=True)
class RankOutcome:
    """What one task returns: the summary, or why the file gave none."""

    path: str
    summary: RankSummary | None = None
    error: str = ""
    truncated: bool = False
    """The file is a trace cut short (a rank that died while writing it), not some other file."""


def summarize_file(path: str) -> RankOutcome:
    """Load, analyse and summarise one rank's trace (runs in a worker)."""
    try:
        table = load_trace(path, parallel=False)  # the pool already uses every core
    except TraceError as exc:
        return RankOutcome(path, error=str(exc), truncated="truncated" in str(exc))
    if len(table) == 0:
        return RankOutcome(path, error=f"{path}: no trace events")
    a = analyze_table(table)
    findings = rank_findings(evaluate(a))[:_FINDINGS_KEPT]
    summary = summarize(a)
    return RankOutcome(path, replace(summary, findings=tuple(f.to_dict() for f in findings)))


def analyze_trace_file(path: str) -> TraceAnalysis:
    """The full analysis of one trace (the detailed part of a folder's report)."""
    return analyze_table(load_trace(path))


def analyze_folder(
    folder: Path, jobs: int | None = None, scheduler: str | None = None, use_dask: bool = False
) -> Report:
    """Every rank summarised in parallel, compared, and the slowest rank analysed in detail."""
    return analyze_files(find_rank_files(folder), str(folder), jobs, scheduler, use_dask)


def analyze_files(
    paths: list[Path],
    where: str,
    jobs: int | None = None,
    scheduler: str | None = None,
    use_dask: bool = False,
) -> Report:
    """``analyze_folder`` for an explicit list of per-rank trace files (``where`` names them in
    messages)."""
    files = [str(f) for f in paths]
    executor = make_executor(jobs, scheduler, use_dask, len(files))
    try:
        outcomes = sorted(executor.map_unordered(summarize_file, files), key=lambda o: o.path)
        summaries, failed, notes = _sort_out(where, outcomes)
        cr = cross_rank(summaries, failed)
        detail_rank = _detail_rank(summaries, cr)
        chosen = next(s for s in summaries if s.rank == detail_rank)
        analysis = executor.call(analyze_trace_file, chosen.path)
    finally:
        executor.close()
    return _report(analysis, detail_rank, summaries, cr, notes, executor.workers)


def _sort_out(
    where: str, outcomes: list[RankOutcome]
) -> tuple[list[RankSummary], list[FailedRank], list[str]]:
    """Summaries numbered and sorted by rank; failed ranks; notes on files that are no trace."""
    notes, failed, ok = [], [], []
    for o in outcomes:
        if o.summary is not None:
            ok.append(o.summary)
            continue
        rank = _rank_in_name(o.path)
        if o.truncated and rank is not None:
            failed.append(FailedRank(rank, f"unreadable trace ({_short(o.error)})", o.path))
        else:
            notes.append(f"skipped {Path(o.path).name}: not a trace ({_short(o.error)})")
    summaries = _numbered(where, ok, {f.rank for f in failed})
    if not summaries:
        raise TraceError(f"{where}: no readable trace among {len(outcomes)} files")
    return summaries, sorted(failed, key=lambda f: f.rank), notes


def _numbered(where: str, ok: list[RankSummary], taken: set[int]) -> list[RankSummary]:
    """Give traces without a rank the lowest free numbers (in file order); sort by rank."""
    known = [s.rank for s in ok if s.rank is not None]
    if len(set(known)) != len(known) or taken & set(known):
        raise TraceError(f"{where}: two traces claim the same rank ({sorted(known)})")
    used = set(known) | taken
    free = (n for n in range(len(ok) + len(used) + 1) if n not in used)
    numbered = [s if s.rank is not None else replace(s, rank=next(free)) for s in ok]
    return sorted(numbered, key=lambda s: s.rank or 0)


def _detail_rank(summaries: list[RankSummary], cr: CrossRank) -> int:
    if cr.slowest_rank is not None:
        return cr.slowest_rank
    bad = {f.rank for f in cr.failed}
    healthy = [s.rank for s in summaries if s.rank not in bad and s.rank is not None]
    return min(healthy) if healthy else min(s.rank or 0 for s in summaries)


def _report(
    a: TraceAnalysis,
    rank: int,
    summaries: list[RankSummary],
    cr: CrossRank,
    notes: list[str],
    workers: int,
) -> Report:
    extra: list[Finding] = ranks_findings(cr)
    base = build_report(a, extra)
    base = dataclasses.replace(base, findings=[skew_or_comm(f, cr, rank) for f in base.findings])
    verdict = base.verdict
    if cr.failed:
        lost = "; ".join(f"rank {f.rank}: {f.reason}" for f in cr.failed)
        verdict = f"{len(cr.failed)} rank(s) failed ({lost}). {verdict}"
    why = "the slowest rank" if rank == cr.slowest_rank else "the lowest healthy rank"
    head = (
        f"{len({s.rank for s in summaries} | {f.rank for f in cr.failed})} ranks "
        f"({len(cr.failed)} failed), analysed by "
        f"{workers} worker(s); details below are for rank {rank} ({why})"
    )
    return Report(
        a,
        base.findings,
        verdict,
        rank_rows(summaries, cr),
        [head, *notes, *cr.notes, *base.notes],
        cross_rank=cr,
    )


def _rank_in_name(path: str) -> int | None:
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


def _short(error: str) -> str:
    """The error without the path it starts with (the note names the file already)."""
    return error.split(": ", 1)[-1]
