"""The terminal form of a folder's ranks: a row per rank, stragglers per step, collective skew."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from torchdoctor.analysis.cross_rank import CrossRank
    from torchdoctor.report.model import Report

_PARTS_SHOWN = 3
_SKEWS_SHOWN = 5


def _part_name(part: str, gpu: bool) -> str:
    """A rank's breakdown part (its unqualified key) as every command names it."""
    from torchdoctor.analysis import breakdown_terms as terms
    from torchdoctor.analysis.breakdown import BUSY_PARTS

    return terms.name(terms.qualified(part, gpu=gpu, busy=gpu and part in BUSY_PARTS))


def render_ranks(con: Console, report: Report) -> None:
    """Print the ranks table, then the cross-rank sections when there is something to say."""
    from torchdoctor.report.layout import Column, TableText, print_table

    heads = ("rank", "steps", "step", "waiting", "own work")
    columns = (
        *(Column(h) for h in heads),
        Column("largest parts", right=False, flex="wrap"),
        Column("status", right=False),
    )
    rows = []
    for r in report.ranks:
        parts = sorted(r.breakdown_ms.items(), key=lambda kv: -kv[1])[:_PARTS_SHOWN]
        shown = ", ".join(f"{_part_name(k, r.gpu_busy_share > 0)}\u00a0{v:.1f}" for k, v in parts)
        rows.append(
            (
                str(r.rank),
                str(r.steps),
                f"{r.mean_step_ms:.2f}",
                f"{r.wait_ms:.2f}",
                f"{r.work_ms:.2f}",
                shown,
                r.status,
            )
        )
    print_table(con, TableText(columns, tuple(rows), title="Ranks (ms per step)"))
    con.print()
    if report.cross_rank is not None:
        _cross(con, report.cross_rank)


def _cross(con: Console, cr: CrossRank) -> None:
    if cr.stragglers:
        per_step = ", ".join(f"step {s.step}: rank {s.rank}" for s in cr.stragglers[:12])
        more = " …" if len(cr.stragglers) > 12 else ""
        con.print(
            f"[bold]Most work per step[/bold] (the rank the others wait for): {per_step}{more}"
        )
    if cr.skews:
        con.print(
            f"[bold]Collective skew[/bold] ({cr.matched_collectives} collectives matched on "
            "every rank; largest first):"
        )
        for c in cr.skews[:_SKEWS_SHOWN]:
            con.print(
                f"  step {c.step} {c.kind} #{c.index + 1}: rank {c.last_rank} arrived "
                f"{c.skew_ms:.2f} ms after the first; the others waited {c.others_wait_ms:.2f} ms"
            )
    if cr.stragglers or cr.skews:
        con.print()
