"""Rank 0's last act: gather every rank's record, write the report files, print the report."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchdoctor.capture.frameworks import framework_hint
from torchdoctor.capture.measurement import measure
from torchdoctor.capture.options import CheckOptions
from torchdoctor.capture.runfolder import RankInfo, release_pointer, wait_for_ranks, write_json
from torchdoctor.commands.check.summary import build_report, render_analysis, summary_text
from torchdoctor.errors import OutputError
from torchdoctor.inputs import write_output
from torchdoctor.record import layout
from torchdoctor.record.run import RunRecord
from torchdoctor.record.write import rank_index
from torchdoctor.report.account_text import account_text
from torchdoctor.report.console import terminal_columns
from torchdoctor.report.layout import fit
from torchdoctor.rules.finding import Finding
from torchdoctor.terminal import clean_report

NO_STEPS = (
    "torchdoctor: no step was seen: the script never finished an optimizer.step(), never "
    "iterated a DataLoader and never called a model (nn.Module), so there is nothing to "
    "profile.\n"
    "Mark the end of each iteration explicitly:\n"
    "    import torchdoctor\n"
    "    torchdoctor.step()\n"
)


def _gather(
    folder: Path, record: dict[str, Any], run: RunRecord, rank: RankInfo, options: CheckOptions
) -> tuple[dict[int, dict[str, Any]], Path | None]:
    if not rank.distributed:
        return {0: record}, folder / run.trace if run.trace else None
    records = wait_for_ranks(folder, rank.world_size, options.rank_timeout_s)
    records[rank.rank] = record
    write_json(layout.run_file(folder), rank_index(rank.world_size, list(records)))
    traces = folder / layout.TRACES
    return records, traces if traces.is_dir() and any(traces.iterdir()) else None


def report_text(
    folder: Path,
    doc: dict[str, Any],
    run: RunRecord,
    analysis: Any,
    merged: list[Finding],
    top: int = 10,
    width: int | None = None,
) -> str:
    """The check report as text, laid out to ``width`` columns (a terminal's: tables keep
    every number whole, prose wraps at its spaces) or, for None, in its log form (tables at
    110 columns, prose lines whole: what ``report.txt`` holds and a pipe gets)."""
    measured = measure(run)
    trace_text, shows_findings = render_analysis(
        analysis, merged, top, measured, doc.get("account"), doc.get("verdict"), width
    )
    summary = summary_text(doc, run, top, with_findings=not shows_findings)
    text = fit(summary, width) + trace_text
    text += account_text(doc, run, top, width)
    for note in doc.get("notes") or []:  # our own failures: caught, the script went on
        text += fit(f"torchdoctor note: {note}", width) + "\n"
    if not run.steps.count and measured.failure is None:
        text = NO_STEPS + text
    text += fit(framework_hint(list(run.frameworks)), width)
    text += fit(f"run folder: {folder}", width) + "\n"
    return clean_report(text)  # names and paths from the run reach a terminal


def publish(
    folder: Path,
    record: dict[str, Any],
    rank: RankInfo,
    options: CheckOptions,
    top: int = 10,
    json_path: str | None = None,
    advise: Callable[[Finding], Finding] | None = None,
    html_path: str | None = None,
) -> dict[str, Any]:
    """Write ``report.json`` and ``report.txt`` into ``folder`` and print the report.

    ``json_path`` ``"-"``: only the JSON report on stdout (the text goes to stderr); a path:
    the JSON report is also written there. ``advise`` rewrites each finding (a framework
    callback phrases fixes in its settings). Returns the report document.
    """
    run = RunRecord.from_dict(record)
    if advise is None and run.framework:  # a framework callback stepped aside for check
        from torchdoctor.rules.framework_advice import rewriter

        advise = rewriter(run.framework)
    records, trace = _gather(folder, record, run, rank, options)
    doc, analysis, merged = build_report(records, trace, rank.world_size)
    if advise is None and run.frameworks:
        # A framework's trainer runs the loop: the fix is its setting, not a line inside it.
        from torchdoctor.rules.framework_advice import rewriter

        advise = rewriter(run.frameworks[0])
    if advise is not None:
        merged = [advise(f) for f in merged]
        doc["findings"] = [f.to_dict() for f in merged]
    text = report_text(folder, doc, run, analysis, merged, top)
    # On a terminal the printed report is laid out to its width; report.txt keeps the log form.
    width = terminal_columns(sys.stderr if json_path == "-" else sys.stdout)
    shown = text if width is None else report_text(folder, doc, run, analysis, merged, top, width)
    try:
        write_json(layout.report_json(folder), doc)
    except OSError as exc:  # a full disk: the environment's, one line naming the file
        raise OutputError(
            f"cannot write the report to {layout.report_json(folder)}: {exc.strerror or exc}"
        ) from None
    write_output(layout.report_text(folder), text, "report")
    text = shown
    release_pointer(options.out_dir, rank)
    if html_path:
        from torchdoctor.report.html_sources import write_check_html

        text += f"wrote {write_check_html(html_path, doc, analysis, run)}\n"
    as_json = json.dumps(doc, indent=1, default=str) + "\n"
    # Every file first: standard output on a full device must not cost the --json file.
    if json_path and json_path != "-":
        write_output(json_path, as_json, "JSON report")
    if json_path == "-":
        sys.stderr.write(text)
        sys.stdout.write(as_json)
    else:
        sys.stdout.write(text)
        if json_path:
            sys.stderr.write(f"torchdoctor: wrote {json_path}\n")
    sys.stdout.flush()
    return doc
