"""HTML report size and render time on every corpus trace, and on a ~1 GB trace.

    python benchmarks/bench_html.py [--large-gb 1.0] [--source v100_ddp_compiled_rank1]

Goal (issue 10): under 5 MB for any corpus trace, and a small page for a 1 GB trace (the timeline
is downsampled, so the page grows with the representative step's structure, not with the file).
Each trace is analysed in this process once; "render s" is building the page's data and its HTML
(the analysis itself is measured by bench_analyze_vs_hta.py). Last line: the largest page as a
share of the 5 MB limit.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench_common import TRACES, environment, print_table
from bench_large_trace import build_large_trace

from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.report.html import render_html
from torchdoctor.report.html_model import page_from_report

LIMIT_BYTES = 5 * 2**20


def measure(path: Path) -> tuple[list[str], int]:
    """One row: trace size, events, steps drawn, timeline blocks and merged events, page size."""
    t0 = time.perf_counter()
    report = analyze_path(path)
    t1 = time.perf_counter()
    page = page_from_report(report)
    html = render_html(page)
    t2 = time.perf_counter()
    tl = page.timeline or {"lanes": []}
    blocks = sum(len(ln["s"]) for ln in tl["lanes"])
    size = len(html.encode())
    json_mb = report.analysis.table.meta.json_bytes / 1e6
    row = [
        path.name.removesuffix(".json.gz").removesuffix(".json"),
        f"{json_mb:.1f}",
        f"{len(report.analysis.table):,}",
        f"{t1 - t0:.2f}",
        f"{t2 - t1:.2f}",
        f"{blocks:,}",
        f"{size / 1024:.0f}",
        f"{size / LIMIT_BYTES:.1%}",
    ]
    return row, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--large-gb", type=float, default=0.0, help="Also build and measure a trace of this size."
    )
    ap.add_argument("--source", default="v100_ddp_compiled_rank1")
    args = ap.parse_args()
    files = sorted(TRACES.glob("*.json.gz"))
    if not files:
        sys.exit(f"no corpus traces in {TRACES} (set TORCHDOCTOR_TRACES)")
    print(environment())
    rows, sizes = [], []
    for f in files:
        row, size = measure(f)
        rows.append(row)
        sizes.append(size)
    if args.large_gb > 0:
        with tempfile.TemporaryDirectory(prefix="td-html-") as tmp:
            big = Path(tmp) / f"{args.source}_x.json"
            build_large_trace(TRACES / f"{args.source}.json.gz", big, int(args.large_gb * 1e9))
            row, size = measure(big)
            rows.append(row)
            sizes.append(size)
    header = [
        "trace",
        "JSON MB",
        "events",
        "analyse s",
        "render s",
        "timeline blocks",
        "HTML KiB",
        "of 5 MB",
    ]
    print_table(header, rows)
    worst = max(sizes)
    print(f"largest page: {worst / 2**20:.2f} MiB = {worst / LIMIT_BYTES:.1%} of the 5 MB limit")


if __name__ == "__main__":
    main()
