"""Rank 0's last act: gather every rank's record, write the report files, print the report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from torchdoctor.capture.options import CheckOptions
from torchdoctor.capture.runfolder import (
    RUN_SCHEMA,
    RUN_SCHEMA_VERSION,
    RankInfo,
    release_pointer,
    wait_for_ranks,
    write_json,
)
from torchdoctor.capture.summary import build_report, render_analysis, summary_text

NO_STEPS = (
    "torchdoctor: no step was seen: the script never finished an optimizer.step() and never "
    "iterated a DataLoader, so there is nothing to profile.\n"
    "Mark the end of each iteration explicitly:\n"
    "    import torchdoctor\n"
    "    torchdoctor.step()\n"
)


def _gather(
    folder: Path, record: dict[str, Any], rank: RankInfo, options: CheckOptions
) -> tuple[dict[int, dict[str, Any]], Path | None]:
    if not rank.distributed:
        trace = folder / record["trace"] if record.get("trace") else None
        return {0: record}, trace
    records = wait_for_ranks(folder, rank.world_size, options.rank_timeout_s)
    records[rank.rank] = record
    write_json(
        folder / "run.json",
        {
            "schema": RUN_SCHEMA,
            "schema_version": RUN_SCHEMA_VERSION,
            "world_size": rank.world_size,
            "ranks": {str(r): f"ranks/rank{r}.json" for r in sorted(records)},
            "missing_ranks": [r for r in range(rank.world_size) if r not in records],
        },
    )
    traces = folder / "traces"
    return records, traces if traces.is_dir() and any(traces.iterdir()) else None


def publish(
    folder: Path,
    record: dict[str, Any],
    rank: RankInfo,
    options: CheckOptions,
    top: int = 10,
    as_json: bool = False,
    html_path: str | None = None,
) -> dict[str, Any]:
    """Write ``report.json`` and ``report.txt`` into ``folder`` and print the report.

    Returns the report document.
    """
    records, trace = _gather(folder, record, rank, options)
    doc, analysis, merged = build_report(records, trace, rank.world_size)
    trace_text, shows_findings = render_analysis(analysis, merged, top)
    text = summary_text(doc, record, top, with_findings=not shows_findings) + trace_text
    if not (record.get("steps") or {}).get("count"):
        text = NO_STEPS + text
    text += f"run folder: {folder}\n"
    write_json(folder / "report.json", doc)
    (folder / "report.txt").write_text(text, encoding="utf-8")
    release_pointer(options.out_dir, rank)
    if html_path:
        from torchdoctor.report.html_sources import write_check_html

        text += f"wrote {write_check_html(html_path, doc, analysis, record)}\n"
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=1, default=str) + "\n")
    else:
        sys.stdout.write(text)
    sys.stdout.flush()
    return doc
