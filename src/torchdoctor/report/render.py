"""Draw a report: a terminal report (rich) or JSON. Nothing here computes anything."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from torchdoctor.report.serialize import report_dict

if TYPE_CHECKING:
    from rich.console import Console

    from torchdoctor.report.model import Report

_SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def render_json(report: Report) -> str:
    """The report as indented JSON text."""
    return json.dumps(report_dict(report), indent=2, default=_jsonable)


def _jsonable(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def render_text(report: Report, top: int = 10, console: Console | None = None) -> None:
    """Print the terminal report: verdict, breakdown, findings with fixes, kernels, operators."""
    from torchdoctor.report.console import make_console

    con = console or make_console()
    _header(con, report)
    a = report.analysis
    if a.graphs is not None and a.graphs.is_capture_trace:
        from torchdoctor.report.inference_text import render_capture

        render_capture(con, a)  # an idle breakdown would mean nothing here
    else:
        _breakdown(con, report)
        if a.serving is not None:
            from torchdoctor.report.inference_text import render_serving

            render_serving(con, a)
    _findings(con, report)
    _ranks(con, report)
    from torchdoctor.report.layout import print_table
    from torchdoctor.report.tables import kernel_table, operator_tables

    kernels = kernel_table(report.analysis, top)
    for table in [kernels, *operator_tables(report.analysis, top)]:
        if table is not None:
            print_table(con, table)
            con.print()
    if report.notes:
        from rich.markup import escape

        con.print("[dim]Notes: " + escape("; ".join(n for n in report.notes if n)) + "[/dim]")


def _header(con: Console, report: Report) -> None:
    a = report.analysis
    meta = a.table.meta
    device = meta.devices[0].get("name", "GPU") if meta.devices else "no GPU in trace"
    where = f"rank {meta.rank}" + (f"/{meta.world_size}" if meta.world_size else "")
    parts = [
        p
        for p in (meta.path.rsplit("/", 1)[-1], device, where if meta.rank is not None else "")
        if p
    ]
    from rich.markup import escape

    con.print(f"[bold]torchdoctor[/bold] · {escape(' · '.join(parts))}")
    con.print(f"[bold]Verdict:[/bold] {escape(report.verdict)}\n")


def _breakdown(con: Console, report: Report) -> None:
    from torchdoctor.analysis import breakdown_terms as terms
    from torchdoctor.analysis.breakdown import NOT_RECORDED
    from torchdoctor.report.layout import Column, TableText, print_table

    a = report.analysis
    t = a.total
    title = f"Step breakdown (ms per step, mean of {a.n_steps} step{'s' * (a.n_steps != 1)})"
    rows: list[tuple[str, str, str]] = []
    bold = []
    # With GPU work the trace does not hold, shares are of the time it accounts for.
    hidden = a.not_recorded_ms
    base = a.accounted_ms if hidden > 0 else t.step_ms
    for key, ms in terms.keyed(t.busy_ms, t.idle_ms).items():
        if ms <= 0 or key == f"idle:{NOT_RECORDED}":
            continue
        per = a.per_step_ms(ms)
        share = ms / base if base > 0 else 0.0
        rows.append((terms.label(key), f"{per:.2f}", f"{share:.1%}"))
    if hidden > 0:
        bold.append(len(rows))
        rows.append(("accounted for", f"{a.mean_step_ms:.2f}", "100%"))
        rows.append((terms.label(f"idle:{NOT_RECORDED}"), f"{a.per_step_ms(hidden):.2f}", ""))
    window_ms = a.per_step_ms(t.step_ms)  # the parts add up to the window
    bold.append(len(rows))
    rows.append((terms.STEP_LABEL, f"{window_ms:.2f}", "" if hidden else "100%"))
    columns = (Column("part", right=False, flex="wrap"), Column("ms/step"), Column("share"))
    print_table(con, TableText(columns, tuple(rows), title=title, bold_rows=frozenset(bold)))
    if t.pageable_h2d_ms > 0:
        con.print(
            f"  of which pageable host→device copies: "
            f"{a.per_step_ms(t.pageable_h2d_ms):.2f} ms/step"
        )
    con.print()


def _findings(con: Console, report: Report) -> None:
    from rich.markup import escape as esc

    from torchdoctor.report.evidence_text import evidence_line
    from torchdoctor.report.saving_text import saving_text

    if not report.findings:
        if "Not a clean bill" in (report.verdict or ""):  # check: the step is not accounted for
            con.print("No findings named; the time is not accounted for (see the lines below).\n")
        else:
            con.print("[green]No findings: none of the rules fired on this run.[/green]\n")
        return
    con.print("[bold]Findings[/bold] (ranked by estimated saving)")
    for i, f in enumerate(report.findings, 1):
        style = _SEVERITY_STYLE[f.severity]
        con.print(f" {i}. [{style}]{f.severity}[/{style}] {esc(f.title)}")
        saving = saving_text(f)
        if saving:
            con.print(f"    {saving}")
        ev = evidence_line(f.evidence)
        con.print(f"    [dim]evidence: {esc(ev)}[/dim]", soft_wrap=True)
        if f.where:
            con.print(f"    [dim]where: {esc(', '.join(f.where[:5]))}[/dim]")
        con.print("    fix:")
        for line in f.fix.splitlines():
            con.print(f"      [green]{esc(line)}[/green]", soft_wrap=True)
        if f.doc_url:
            con.print(f"    [dim]docs: {f.doc_url}[/dim]")
    con.print()


def _ranks(con: Console, report: Report) -> None:
    if report.ranks:
        from torchdoctor.report.rank_text import render_ranks

        render_ranks(con, report)
