"""The ``compare`` command: exit 0 (no gate, or it passed), 1 (the gate failed), 2 (bad input),
3 (an internal error: never read as "slower")."""

from __future__ import annotations

import json
import sys

import click

from torchdoctor.cli_options import CONTEXT, html_option, option_from, top_option
from torchdoctor.compare.estimates import RUN_TO_RUN_PCT
from torchdoctor.compare.options import TOP, CompareOptions, sides_of
from torchdoctor.compare.rerun_types import RerunOptions
from torchdoctor.exits import EXIT_SLOWER as EXIT_GATE_FAILED
from torchdoctor.exits import guarded
from torchdoctor.json_arg import (
    TwoInputJsonCommand,
    emit_json,
    json_option,
    json_safe,
    json_target,
)

_AFTER_DASHES = "torchdoctor.compare.after_dashes"
_option = option_from(RerunOptions())
"""An option whose default is the rerun's own."""


class _SeesDashes(TwoInputJsonCommand):
    """Remembers how many arguments followed ``--``: ``compare A1 A2 -- B1 B2`` splits the sides
    there, and ``compare --rerun A.py B.py -- ARGS`` passes ARGS to both scripts."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_AFTER_DASHES] = len(args) - args.index("--") - 1 if "--" in args else None
        return super().parse_args(ctx, args)


@click.command("compare", cls=_SeesDashes, context_settings=CONTEXT)
@click.argument("sides", nargs=-1, type=click.Path(path_type=str))
@click.option(
    "--fail-if-slower",
    "fail_pct",
    type=click.FloatRange(0),
    default=None,
    metavar="PCT",
    help="Exit 1 when the verdict's cost (time to the job's length, else the mean step) is "
    "slower by more than PCT percent with its whole interval on the slower side. With one run a "
    "side only a slowdown beyond the run-to-run allowance fails; the gate line says so.",
)
@json_option("the comparison")
@top_option("Rows in each kernel and operator table.", TOP)
@html_option("page")
@click.option(
    "--job-steps",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="Your job's length in steps: adds the time to N steps (one-time costs included) and "
    "the verdict follows it.",
)
@click.option(
    "--run-noise",
    "run_noise_pct",
    type=click.FloatRange(0, 10_000),
    default=RUN_TO_RUN_PCT,
    metavar="PCT",
    help="Run-to-run allowance for one run a side: two runs of the same code differ by up to "
    "PCT percent on this machine (measure yours with benchmarks/compare_run_noise.py).",
)
@click.option(
    "--rerun",
    is_flag=True,
    help="SIDES are two scripts: run them alternately in fresh processes (a random order, "
    "reversed the next round; profiler off) and decide on per-round ratios.",
)
@_option(
    "--rounds",
    type=click.IntRange(1, 1000),
    help="--rerun: rounds at most (it stops once decided, after 6: the fewest with a 95% "
    "interval).",
)
@_option(
    "--warmup",
    type=click.IntRange(0),
    help="--rerun: warm-up steps per run (compile, first batches); their excess over steady "
    "steps is the one-time cost.",
)
@_option(
    "--steps", type=click.IntRange(1), help="--rerun: steady-state steps per run after the warm-up."
)
@click.option(
    "--full", is_flag=True, help="--rerun: let each run go to the script's end (the whole job)."
)
@_option("--seed", type=int, help="--rerun: order shuffle seed.")
@_option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(1),
    metavar="SECONDS",
    help="--rerun: seconds one run may take.",
)
def compare_command(
    sides: tuple[str, ...],
    fail_pct: float | None,
    json_path: str | None,
    top: int,
    html_path: str | None,
    job_steps: int | None,
    run_noise_pct: float,
    rerun: bool,
    rounds: int,
    warmup: int,
    steps: int,
    full: bool,
    seed: int,
    timeout_s: float,
) -> None:
    """Compare BASE and NEW: two traces, two folders of rank traces, two `check` run folders,
    two `tune --json` results; several runs a side (`A1 A2 -- B1 B2`, or folders of run
    folders); or, with --rerun, two scripts run alternately in fresh processes.

    \b
      torchdoctor compare before.json.gz after.json.gz
      torchdoctor compare main-run/ pr-run/ --fail-if-slower 5
      torchdoctor compare runs/a1 runs/a2 runs/a3 runs/a4 -- runs/b1 runs/b2 runs/b3 runs/b4
      torchdoctor compare --rerun train.py train_fixed.py -- --epochs 1
    """
    after = click.get_current_context().meta.get(_AFTER_DASHES)

    def options() -> CompareOptions:
        plan = (
            RerunOptions(rounds=rounds, warmup=warmup, steps=steps, full=full, seed=seed,
                         timeout_s=timeout_s, job_steps=job_steps)
            if rerun else None
        )  # fmt: skip
        base, new, args = sides_of(sides, after, rerun)
        return CompareOptions(
            base, new, script_args=args, fail_pct=fail_pct, json_path=json_path, top=top,
            html_path=html_path, job_steps=job_steps, run_noise_pct=run_noise_pct, rerun=plan,
        )  # fmt: skip

    failed = guarded(lambda: run(options()))()
    sys.exit(EXIT_GATE_FAILED if failed else 0)


def run(o: CompareOptions) -> bool:
    """Compare, print the report (or only its JSON), write the HTML page; True when the gate
    failed."""
    return _rerun(o, o.rerun) if o.rerun is not None else _compare(o)


def _compare(o: CompareOptions) -> bool:
    from torchdoctor.compare import render
    from torchdoctor.compare.diff import compare
    from torchdoctor.compare.runs import load_runs
    from torchdoctor.inputs import output_path

    if o.html_path:
        output_path(o.html_path, "HTML page")
    json_target(o.json_path, o.paths)
    c = compare(
        load_runs(list(o.base)),
        load_runs(list(o.new)),
        job_steps=o.job_steps,
        run_noise_pct=o.run_noise_pct,
    )
    if not emit_json(
        json.dumps(json_safe(render.to_dict(c, o.fail_pct, o.top)), indent=1), o.json_path
    ):
        from torchdoctor.terminal import clean_report

        click.echo(clean_report(render.render_text(c, o.fail_pct, o.top)), nl=False)
    if o.html_path:
        from torchdoctor.report.html import write_html

        write_html(render.page(c, o.fail_pct, o.top), o.html_path)
        click.echo(f"wrote {o.html_path}", err=True)
    return o.fail_pct is not None and c.gate(o.fail_pct)


def _rerun(o: CompareOptions, plan: RerunOptions) -> bool:
    from torchdoctor.compare import rerun_render
    from torchdoctor.compare.rerun import Script, run_interleaved
    from torchdoctor.errors import UserError

    json_target(o.json_path, o.paths)
    base, new = Script(o.base[0], o.script_args), Script(o.new[0], o.script_args)
    result = run_interleaved(
        base,
        new,
        plan,
        on_run=lambda r: click.echo(rerun_render.progress(r, plan.rounds), err=True),
    )
    if result.verdict is None:
        raise UserError(f"--rerun: {result.failure}")
    if not emit_json(
        json.dumps(json_safe(rerun_render.to_dict(result, o.fail_pct)), indent=1), o.json_path
    ):
        click.echo(rerun_render.render_text(result, o.fail_pct), nl=False)
    if o.html_path:
        from torchdoctor.report.html import write_html

        write_html(rerun_render.page(result, o.fail_pct), o.html_path)
        click.echo(f"wrote {o.html_path}", err=True)
    return o.fail_pct is not None and result.verdict.gate(o.fail_pct)
