"""``torchdoctor memory`` as a command: its options, ``run(options)`` (the snapshot's report
and its series, as data) and ``emit`` (text or JSON, the HTML page, through ``report/``).
Never imports torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchdoctor.memory.model import MemoryReport, SeriesPoint


@dataclass(frozen=True)
class MemoryOptions:
    """One ``memory`` run (the defaults are the command line's)."""

    snapshot: str
    """A ``torch.cuda.memory._dump_snapshot`` pickle."""
    json_path: str | None = None
    """``--json [PATH]``: the JSON report on standard output (``-``) or in a file."""
    stream: bool | None = None
    """The bounded-memory streaming reader forced on or off (None: on above 64 MiB)."""
    html_path: str | None = None


@dataclass(frozen=True)
class MemoryResult:
    report: MemoryReport
    series: dict[int, tuple[SeriesPoint, ...]] | None
    """The memory-over-time series for the HTML page (read only when one is asked for)."""


def run(o: MemoryOptions) -> MemoryResult:
    """Read and judge the snapshot (its outputs checked first)."""
    from torchdoctor.inputs import output_path
    from torchdoctor.json_arg import json_target
    from torchdoctor.memory.analysis import analyze_ingested, series_of_ingested
    from torchdoctor.memory.ingest import ingest

    if o.html_path:
        output_path(o.html_path, "HTML page")
    json_target(o.json_path, [o.snapshot])
    path = Path(o.snapshot)
    data = ingest(path, stream=o.stream)
    report = analyze_ingested(path, data)
    return MemoryResult(report, series_of_ingested(data) if o.html_path else None)


def emit(result: MemoryResult, o: MemoryOptions) -> str | None:
    """Write the HTML page (first: a reader that closes standard output early, ``| head``,
    must not cost the file), then print the report (or only its JSON); return the page's path."""
    import click

    from torchdoctor.json_arg import emit_json
    from torchdoctor.report.memory_text import render_json, render_text
    from torchdoctor.terminal import clean_report

    written = None
    if o.html_path and result.series is not None:
        from torchdoctor.report.html import write_html
        from torchdoctor.report.memory_page import page_from_memory

        written = str(write_html(page_from_memory(result.report, result.series), o.html_path))
        click.echo(f"wrote {written}", err=True)
    if not emit_json(render_json(result.report), o.json_path):
        click.echo(clean_report(render_text(result.report)))
    return written
