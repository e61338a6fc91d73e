"""``torchdoctor fix SCRIPT [ARGS...]`` / ``torchdoctor fix --from RUN``: findings to a patch.

Standard output carries only the patch (``--diff``, the default: ``git apply``-able) or only
the JSON document (a bare ``--json``); the summary, the script's own output and progress go
to standard error.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from torchdoctor.cli_options import (
    SCRIPT_CONTEXT,
    html_option,
    option_from,
    runs_option,
    script_arguments,
)
from torchdoctor.commands.check.args import JSON_STDOUT, ScriptCommand, check_json_path
from torchdoctor.errors import UserError
from torchdoctor.exits import user_errors
from torchdoctor.fix.options import FixOptions
from torchdoctor.json_arg import json_option
from torchdoctor.record import layout

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord

_option = option_from(FixOptions())


@click.command("fix", cls=ScriptCommand, context_settings=SCRIPT_CONTEXT)
@script_arguments(required=False)
@click.option(
    "--from",
    "run_folder",
    type=click.Path(path_type=str, file_okay=False),
    help="Read a `torchdoctor check` run folder instead of running the script.",
)
@click.option(
    "--only",
    default=None,
    metavar="IDS",
    help="Fix only these findings (comma-separated ids, e.g. host-syncs-in-step).",
)
@click.option(
    "--all",
    "include_all",
    is_flag=True,
    help="Also propose changes for info findings and those whose predicted gain is within noise.",
)
@click.option(
    "--diff",
    "mode",
    flag_value="diff",
    default=True,
    show_default=False,  # the help says it
    help="Print the patch (default).",
)
@click.option(
    "--write",
    "mode",
    flag_value="write",
    help="Apply the patch; each original is kept as FILE.orig.",
)
@json_option(
    "every change (finding, file, line, status)",
    type=click.Path(path_type=str, dir_okay=False),
)
@html_option("page")
@click.option(
    "--prove", is_flag=True, help="Measure each change against the original, interleaved."
)
@_option(
    "--min-gain",
    type=click.FloatRange(0),
    help="With --prove: a change is kept when its speed-up interval clears 1 + this.",
)
@click.option(
    "--keep-unproven", is_flag=True, help="With --prove: keep changes without a measured gain."
)
@_option("--rounds", type=click.IntRange(2, 200), help="With --prove: interleaved rounds.")
@_option(
    "--prove-steps",
    type=click.IntRange(1),
    help="With --prove: measured steps per process (after --warmup).",
)
@_option("--seed", type=int, help="With --prove: the script's seed.")
@_option("--warmup", type=click.IntRange(0), help="Warm-up steps (check and prove).")
@_option("--steps", "check_steps", type=click.IntRange(1), help="Steps check profiles.")
@runs_option("Parent folder of check's run folders.")
def fix_command(
    script: str | None,
    script_args: tuple[str, ...],
    run_folder: str | None,
    only: str | None,
    mode: str,
    json_path: str | None,
    html_path: str | None,
    **options: Any,
) -> None:
    """Turn check's findings into a patch of SCRIPT's own files (runs `check` first, or reads
    --from RUN), optionally proven by interleaved runs.

    \b
      torchdoctor fix train.py --lr 3e-4              print the patch
      torchdoctor fix --prove --write train.py        measure, apply what is faster
      torchdoctor fix --from torchdoctor-runs/train-20261201-120000 --json fix.json
    """
    with user_errors():
        check_json_path(json_path)
        opts = FixOptions(
            mode="write" if mode == "write" else "diff",
            only=FixOptions.parse_only(only),
            **options,
        )
        result = run_fix(script, list(script_args), run_folder, opts)
        emit(result, opts.mode, json_path, html_path)
    if result.failure is not None:  # the script's own status, as check exits with it
        sys.exit(result.failure.code)


def _say(line: str) -> None:
    click.echo(f"torchdoctor: {line}", err=True)


def load_run(folder: str) -> tuple[RunRecord, list[dict[str, Any]]]:
    """The run's record (rank 0's under torchrun) and the merged findings of a run folder (the
    record's own when there is no ``report.json``)."""
    from torchdoctor.record.folder import read_run

    base = Path(folder)
    record = read_run(base)  # rank 0's record under torchrun; a one-line error when unreadable
    try:
        report = layout.report_json(base)
        if not report.is_file():
            return record, record.findings
        doc = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{folder}: cannot read the run: {exc}") from None
    findings = [f for f in doc.get("findings") or [] if isinstance(f, dict)]
    return record, findings


def _check(script: str, args: list[str], warmup: int, steps: int, out_dir: str) -> str:
    from torchdoctor.capture.options import CheckOptions
    from torchdoctor.capture.streams import stdout_to_stderr
    from torchdoctor.commands.check.run import run_check

    if not os.path.isfile(script):
        raise UserError(f"{script}: no such script")
    options = CheckOptions(warmup_steps=warmup, profile_steps=steps, out_dir=out_dir)
    _say(f"running check on {script} ...")
    cwd = os.getcwd()
    with stdout_to_stderr():
        try:
            result = run_check(script, args, options, echo=False)
        finally:
            # The script ran in this process and may have changed the working directory
            # (os.chdir, Hydra's job.chdir); fix reads the script and writes its patch, --json
            # and --html from where it was started (unless the script removed that folder).
            with contextlib.suppress(OSError):
                os.chdir(cwd)
    _say(f"run folder: {result.folder}")
    return str(result.folder)


def run_fix(
    script: str | None,
    args: list[str],
    run_folder: str | None,
    opts: FixOptions,
) -> Any:
    """Check (or read the run), plan the changes, prove them when asked; the ``FixResult``."""
    from torchdoctor.fix.context import FixContext
    from torchdoctor.fix.model import FindingRef
    from torchdoctor.fix.planner import plan, within_noise
    from torchdoctor.fix.registry import codemods_for
    from torchdoctor.fix.render import FixResult, ScriptFailure

    if (script is None) == (run_folder is None):
        raise UserError("give a script to check, or --from RUN_FOLDER (one of the two)")
    if run_folder is None:
        assert script is not None
        run_folder = _check(script, args, opts.warmup, opts.check_steps, opts.out_dir)
    record, raw = load_run(run_folder)
    cwd = os.getcwd()
    name = script or record.script or ""
    path = os.path.abspath(name) if name and os.path.isfile(name) else None
    if script is None and not args:
        args = list(record.argv)
    ctx = FixContext(record, cwd, path)
    findings = [FindingRef.from_dict(f) for f in raw]
    for f in findings:
        ctx.add_sites_of([f.evidence, list(f.where)])
    notes = []
    if opts.only:
        findings = [f for f in findings if f.id in opts.only]
        if not findings:
            notes.append(f"no finding of the run is one of --only {','.join(opts.only)}")
    elif not opts.include_all:  # --only names what it wants: that is asking
        kept = []
        for f in findings:
            why = within_noise(f) if codemods_for(f.id) else None
            if why is None:
                kept.append(f)
            else:
                notes.append(f"not proposed: {f.id} {why}; --all to include")
        findings = kept
    notes.extend(by_hand(raw, opts.only))
    if path is None:
        notes.append(f"the script {name or '?'} is not here: run fix from the folder check ran in")
    p = plan(findings, ctx)
    failure = ScriptFailure.of(record)
    result = FixResult(p, path, run_folder, notes=notes, options=opts.to_dict(), failure=failure)
    if opts.prove and (p.patched or p.switched):
        if path is None:
            raise UserError("--prove needs the script: run fix from the folder check ran in")
        result = _prove(result, path, args, opts)
    return result


def by_hand(raw: list[dict[str, Any]], only: Any = None) -> list[str]:
    """A note per warning or critical finding no codemod answers: what it costs, where, and
    what the report says to change (by hand: no edit of ours fits it, so none is printed as
    code to paste)."""
    from torchdoctor.fix.model import FindingRef
    from torchdoctor.fix.planner import within_noise
    from torchdoctor.fix.registry import codemods_for

    out = []
    for d in raw:
        fid = str(d.get("id") or "")
        if (only and fid not in only) or codemods_for(fid) or d.get("severity") == "info":
            continue
        ref = FindingRef.from_dict(d)
        if within_noise(ref) is not None:
            continue
        what = next(
            (
                line.lstrip("# ").rstrip(":")
                for line in str(d.get("fix") or "").splitlines()
                if line.strip()
            ),
            "",
        )
        title = str(d.get("title") or fid)
        where = ref.where[0].rsplit("/", 1)[-1] if ref.where else ""
        at = f" ({where})" if where and where not in title else ""
        out.append(
            f"by hand: {fid}: {title}{at}; no automatic change fits it"
            + (f"; the report's remedy: {what}" if what else "")
        )
    return out


def _prove(result: Any, script: str, args: list[str], opts: FixOptions) -> Any:
    from dataclasses import replace

    from torchdoctor.fix.prove import ProveOptions, prove

    po = ProveOptions(
        rounds=opts.rounds,
        warmup=opts.warmup,
        steps=opts.prove_steps,
        min_gain=opts.min_gain,
        keep_unproven=opts.keep_unproven,
        seed=opts.seed,
    )
    n = len(result.plan.patched) + len(result.plan.switched)
    arms = n + 1 + (n > 1)
    _say(f"proving {n} change(s): {po.rounds} rounds of {arms} processes")
    proof = prove(result.plan, script, args, po, progress=_say)
    return replace(result, plan=proof.plan, proof=proof)


def emit(result: Any, mode: str, json_path: str | None, html_path: str | None) -> None:
    """Write, print the patch or the JSON, the summary on stderr, the HTML page."""
    from dataclasses import replace

    from torchdoctor.fix import diff
    from torchdoctor.fix.planner import compose
    from torchdoctor.fix.render import summary_lines, to_json, write_json

    if mode == "write" and result.kept:
        files, _ = compose(result.plan, result.kept)
        written = diff.write_patched(result.plan.originals, files)
        result = replace(result, written=[(f, str(b)) for f, b in written])
    if json_path == JSON_STDOUT:
        click.echo(to_json(result))
    elif mode == "diff":
        patch = result.patch
        if patch:
            click.echo(patch, nl=False)
    if json_path and json_path != JSON_STDOUT:
        write_json(result, json_path)
    from torchdoctor.report.console import terminal_columns

    for line in summary_lines(result, terminal_columns(sys.stderr)):  # a terminal's width
        click.echo(line, err=True)
    if html_path:
        from torchdoctor.fix.html import write_page

        written_html = write_page(result, html_path)
        _say(f"wrote {written_html}")
