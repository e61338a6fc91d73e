"""The Python API: ``torchdoctor.analyze`` and ``torchdoctor.check``, for notebooks and scripts.

The command line is a thin layer over these two functions (see ``docs/api.md``). ``analyze``
never imports torch; ``check`` runs a script or a function in this process, so it needs torch.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchdoctor.commands.check.run import CheckResult, run_check
from torchdoctor.errors import UserError

__all__ = ["CheckResult", "Report", "analyze", "check", "run_check"]

if TYPE_CHECKING:
    from torchdoctor.analysis.breakdown import StepBreakdown
    from torchdoctor.analysis.bundle import TraceAnalysis
    from torchdoctor.analysis.kernels import KernelStats
    from torchdoctor.report.model import Report as _Report
    from torchdoctor.rules.finding import Finding
    from torchdoctor.rules.rank_rules import RankRow

PathLike = str | Path


@dataclass(frozen=True)
class Report:
    """What ``analyze`` found in a trace (or one trace per rank)."""

    _report: _Report = field(repr=False)

    @property
    def model(self) -> _Report:
        """The report as the renderers (text, JSON, HTML, Perfetto export) take it."""
        return self._report

    @property
    def verdict(self) -> str:
        """One line: step time, device busy share, and the fix worth most."""
        return self._report.verdict

    @property
    def breakdown(self) -> StepBreakdown:
        """Where the analysed steps' time went, summed over steps (milliseconds per part)."""
        return self._report.analysis.total

    @property
    def per_step(self) -> list[StepBreakdown]:
        """The same breakdown, one entry per step."""
        return list(self._report.analysis.per_step)

    @property
    def mean_step_ms(self) -> float:
        """Mean wall time of an analysed step, in milliseconds."""
        return self._report.analysis.mean_step_ms

    @property
    def findings(self) -> list[Finding]:
        """Diagnosed problems, the largest estimated saving first."""
        return list(self._report.findings)

    @property
    def kernels(self) -> KernelStats | None:
        """GPU kernel statistics (None for a trace with no GPU activity)."""
        return self._report.analysis.kernels

    @property
    def ranks(self) -> list[RankRow]:
        """One row per rank when several traces were analysed; empty for one trace."""
        return list(self._report.ranks)

    @property
    def notes(self) -> list[str]:
        """Caveats about the trace or the analysis."""
        return [n for n in self._report.notes if n]

    @property
    def analysis(self) -> TraceAnalysis:
        """Every analysis of the (lowest rank's) trace."""
        return self._report.analysis

    def finding(self, finding_id: str) -> Finding | None:
        """The finding with this id, or None."""
        return next((f for f in self._report.findings if f.id == finding_id), None)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-able data (the schema of ``analyze --json``)."""
        from torchdoctor.report.serialize import report_dict

        return report_dict(self._report)

    def to_json(self) -> str:
        """The report as JSON text, exactly what ``torchdoctor analyze --json`` prints."""
        from torchdoctor.report.render import render_json

        return render_json(self._report)

    def print(self, top: int = 10) -> None:
        """Print the terminal report (what ``torchdoctor analyze`` prints)."""
        from torchdoctor.report.render import render_text

        render_text(self._report, top=top)

    def text(self, top: int = 10, width: int = 110) -> str:
        """The terminal report as plain text (no colours)."""
        from rich.console import Console

        from torchdoctor.report.render import render_text
        from torchdoctor.terminal import inert

        buf = io.StringIO()
        console = inert(Console(file=buf, width=width, color_system=None))
        render_text(self._report, top=top, console=console)
        return buf.getvalue()

    def __str__(self) -> str:
        return self.verdict


def analyze(
    path_or_paths: PathLike | Sequence[PathLike],
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
    dask: bool = False,
) -> Report:
    """Analyse a torch.profiler trace: a .json / .json.gz file, a folder of per-rank traces, a
    ``torchdoctor check`` run folder, or a list of per-rank trace files. For several ranks,
    ``jobs`` worker processes summarise them (or a Dask cluster: ``scheduler`` address, or
    ``dask=True`` for a local one). Raises ``TraceError`` (a ``UserError``) on bad input."""
    from torchdoctor.commands.analyze.trace import analyze_path

    if isinstance(path_or_paths, str | Path):
        return Report(analyze_path(path_or_paths, jobs, scheduler, dask))
    paths = [Path(p) for p in path_or_paths]
    if not paths:
        raise UserError("analyze() needs at least one trace path")
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise UserError(f"{missing[0]}: no such trace file")
    if len(paths) == 1:
        return Report(analyze_path(paths[0]))
    from torchdoctor.commands.analyze.ranks import analyze_files  # only for several ranks

    return Report(analyze_files(paths, f"{len(paths)} trace files", jobs, scheduler, dask))


def check(
    target: PathLike | Callable[[], Any],
    args: Sequence[str] = (),
    *,
    warmup_steps: int = 5,
    profile_steps: int = 5,
    full: bool = False,
    out_dir: PathLike = "torchdoctor-runs",
    echo: bool = False,
    **options: Any,
) -> CheckResult:
    """Run ``target`` (a script path run as ``__main__`` with ``args``, or a function called
    with no arguments) under watch, profile ``profile_steps`` steps after ``warmup_steps``,
    and write the run folder; returns what ``torchdoctor check`` would print. Other keyword
    arguments are ``CheckOptions`` fields (``record_shapes``, ``with_stack``, ...)."""
    from torchdoctor.commands.check.args import check_options

    opts = check_options("check()", warmup_steps, profile_steps, out_dir, full, **options)
    return run_check(target, list(args), opts, echo=echo)
