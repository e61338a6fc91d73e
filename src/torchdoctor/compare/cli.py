"""The ``compare`` command: exit 0 (no gate, or it passed), 1 (the gate failed), 2 (bad input),
3 (an internal error: never read as "slower")."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from torchdoctor.exits import EXIT_SLOWER as EXIT_GATE_FAILED


@click.command("compare", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("base", type=click.Path(path_type=str))
@click.argument("new", type=click.Path(path_type=str))
@click.option(
    "--fail-if-slower",
    "fail_pct",
    type=click.FloatRange(0),
    default=None,
    metavar="PCT",
    help="Exit 1 when NEW's median step is slower by more than PCT percent and beyond the noise.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON instead.")
@click.option(
    "--top",
    default=10,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Rows in each kernel and operator table.",
)
@click.option(
    "--html", "html_path", type=click.Path(path_type=str), help="Also write an HTML page."
)
def compare_command(
    base: str, new: str, fail_pct: float | None, as_json: bool, top: int, html_path: str | None
) -> None:
    """Compare BASE and NEW: two traces, two folders of rank traces, two `check` run folders or
    two `tune --json` results.

    \b
      torchdoctor compare before.json.gz after.json.gz
      torchdoctor compare main-run/ pr-run/ --fail-if-slower 5
    """
    from torchdoctor.cli import _guarded

    failed = _guarded(_compare)(base, new, fail_pct, as_json, top, html_path)
    sys.exit(EXIT_GATE_FAILED if failed else 0)


def _compare(
    base: str, new: str, fail_pct: float | None, as_json: bool, top: int, html_path: str | None
) -> bool:
    from torchdoctor.compare import render
    from torchdoctor.compare.diff import compare
    from torchdoctor.compare.sides import load_side
    from torchdoctor.inputs import output_path

    if html_path:
        output_path(html_path, "HTML page")

    c = compare(load_side(base), load_side(new))
    if as_json:
        click.echo(json.dumps(_clean(render.to_dict(c, fail_pct, top)), indent=1))
    else:
        from torchdoctor.terminal import clean_report

        click.echo(clean_report(render.render_text(c, fail_pct, top)), nl=False)
    if html_path:
        from torchdoctor.report.html import write_html

        write_html(render.page(c, fail_pct, top), html_path)
        click.echo(f"wrote {html_path}", err=True)
    return fail_pct is not None and c.gate(fail_pct)


def _clean(x: Any) -> Any:
    """NaN and infinities as null: the output stays valid JSON."""
    if isinstance(x, float):
        return x if x == x and abs(x) != float("inf") else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x
