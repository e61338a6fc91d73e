"""``torchdoctor check SCRIPT [ARGS...]``: run an unmodified training script and diagnose it.

Register in the main CLI with ``cli.add_command(check_command)``; also runnable directly as
``python -m torchdoctor.commands.check.cli SCRIPT [ARGS...]``.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import click

from torchdoctor.capture.options import CheckOptions
from torchdoctor.cli_options import (
    SCRIPT_CONTEXT,
    html_option,
    option_from,
    runs_option,
    script_arguments,
    top_option,
)
from torchdoctor.commands.check.args import (
    ScriptCommand,
    check_json_path,
    checked_outputs,
    reject_option_as_script,
)
from torchdoctor.exits import OneLineErrors, user_errors
from torchdoctor.json_arg import json_option

# each option's default is CheckOptions' (the class attribute: an instance would make out_dir
# absolute where this module is imported)
_option = option_from(CheckOptions)


class _CheckCommand(OneLineErrors, ScriptCommand):
    """Usage errors in one line when run on its own (``python -m``) too."""


@click.command("check", cls=_CheckCommand, context_settings=SCRIPT_CONTEXT)
@script_arguments()
@_option(
    "--warmup",
    "warmup_steps",
    type=click.IntRange(0),
    help="Steps run before profiling (absorb compilation).",
)
@_option("--steps", "profile_steps", type=click.IntRange(1), help="Steps to profile.")
@_option(
    "--clean-steps",
    type=click.IntRange(0),
    help="Steps timed after the warm-up with no instrument armed: the report's step time "
    "(0: none).",
)
@_option("--full", is_flag=True, help="Let the script run to its end after the profiled steps.")
@_option("--shapes/--no-shapes", "record_shapes", help="Record operator input shapes.")
@_option("--stack/--no-stack", "with_stack", help="Record Python stacks (slower).")
@_option(
    "--memory/--no-memory",
    "profile_memory",
    help="Record allocations (and CUDA allocator history for OOM snapshots).",
)
@runs_option("Parent folder of run folders.")
@top_option("Findings and table rows to show.")
@json_option(
    "the report",
    " (the script's own output then goes to stderr)",
    click.Path(path_type=str, dir_okay=False),
)
@html_option()
@_option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(0, min_open=True),
    metavar="SECONDS",
    help="Stop the script after this many seconds (as Ctrl-C would) and report the steps "
    "measured so far; exit status 124.",
)
@_option(
    "--profile-memory-budget",
    "profile_memory_budget_mb",
    type=click.FloatRange(min=1),
    help="MiB the profiler's recording may add (then it stops and the report covers what "
    "was recorded).",
)
@_option(
    "--rank-timeout",
    "rank_timeout_s",
    type=click.FloatRange(0),
    help="Seconds rank 0 waits for other ranks' results.",
)
def check_command(
    script: str,
    script_args: tuple[str, ...],
    top: int,
    json_path: str | None,
    html_path: str | None = None,
    **options: Any,
) -> None:
    """Run SCRIPT (with its own arguments) as __main__, profile a window of its steps, and
    report what slows it down, including what no trace shows.

    \b
      torchdoctor check train.py --lr 3e-4
      torchrun --nproc_per_node=2 -m torchdoctor check train.py

    Exits with the script's own exit status (124 at --timeout); when a signal ended the
    script (a segfault, SIGKILL, SIGTERM, Ctrl-C), check ends by that signal once the report is
    out (a shell shows 128 + N); a torchdoctor error exits 2 (bad input) or 3 (internal) before
    the script runs.
    A parent process watches the script, so the steps measured so far are reported however it
    ends (os._exit, a segfault, SIGKILL, SIGTERM).
    """
    with user_errors():
        reject_option_as_script(script)
        check_json_path(json_path)
        json_path, html_path = checked_outputs(json_path, html_path)
        opts = CheckOptions(**options)
        code = _run_watched(script, list(script_args), opts, top, json_path, html_path)
    sys.exit(code)


def _run_watched(
    script: str,
    args: list[str],
    options: CheckOptions,
    top: int,
    json_path: str | None,
    html_path: str | None,
) -> int:
    """``run_check`` in a child process watched by this one, where the console script runs."""
    from torchdoctor.capture import runner
    from torchdoctor.commands.check import watcher
    from torchdoctor.inputs import input_path

    if not watcher.available():
        return run_check(script, args, options, top, json_path, html_path)
    input_path(script, "script")  # errors come from the parent, before any fork
    ending, folder = watcher.fork_watched(script, options, top, json_path, html_path)
    if ending is not None:  # the parent: the child ran the script and is gone
        if ending.signum is not None:
            from torchdoctor.exits import end_by_signal, say

            name = signal.Signals(ending.signum).name
            say(
                f"torchdoctor: the script was ended by {name}; check ends by {name} too "
                f"(status {ending.code} in a shell)"
            )
            end_by_signal(ending.signum)
        return ending.code
    runner.PRESET_FOLDER = folder
    return run_check(script, args, options, top, json_path, html_path)


def run_check(
    script: str,
    args: list[str],
    options: CheckOptions,
    top: int,
    json_path: str | None = None,
    html_path: str | None = None,
) -> int:
    """Watch the script, publish the report on rank 0; returns the script's exit status.

    ``json_path``: ``None`` prints the text report, ``"-"`` prints only JSON on stdout (the
    script's output and the text report go to stderr), a path writes the JSON report there.
    ``html_path`` also writes the self-contained HTML report.
    """
    from torchdoctor.commands.check.run import run_check as api_run_check

    result = api_run_check(
        script, args, options, echo=True, top=top, json_path=json_path, html_path=html_path
    )
    return result.exit_code  # the script's own status, whatever was or was not measured


if __name__ == "__main__":
    from torchdoctor import exits

    exits.console_script = True
    check_command(prog_name="torchdoctor check")
