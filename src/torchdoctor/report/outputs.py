"""The extra files a command can write beside its text report: ``--html`` and ``--export-trace``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchdoctor.report.model import Report


def write_extras(report: Report, html_path: str | None, export_path: str | None) -> None:
    """Write the HTML page and/or the Perfetto export of ``report``; says so on stderr (stdout
    may carry JSON)."""
    if html_path:
        from torchdoctor.report.html import write_html
        from torchdoctor.report.html_model import page_from_report

        write_html(page_from_report(report), html_path)
        print(f"wrote {html_path}", file=sys.stderr)
    if export_path:
        from torchdoctor.report.perfetto import export_trace

        export_trace(report.analysis, report.findings, export_path)
        print(f"wrote {export_path} (open it in https://ui.perfetto.dev)", file=sys.stderr)
