"""The ``torchdoctor`` command line.

Only click is imported at start-up; each subcommand imports what it needs when it runs, so
``torchdoctor --help`` stays fast and ``analyze`` never imports torch.
"""

from __future__ import annotations

import os
import sys
from typing import ClassVar

import click

from torchdoctor import exits
from torchdoctor._version import __version__
from torchdoctor.cli_options import CONTEXT, html_option, top_option
from torchdoctor.exits import EXIT_INTERNAL, OneLineErrors, broken_pipe, guarded
from torchdoctor.json_arg import JsonPathCommand, json_option

COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("analyze", "TRACE", "diagnose a torch.profiler trace (file or folder of ranks)"),
    ("check", "train.py ARGS", "run a script unchanged, watch it, report what is slow"),
    ("tune", "workload.py", "measure configurations, keep the fastest faithful one"),
    ("memory", "SNAPSHOT", "explain a CUDA memory snapshot: peak, holders, fragmentation, OOM"),
    ("compare", "BASE NEW", "before/after, with a regression gate for CI"),
    ("fix", "train.py ARGS", "patch the script for what check found (--prove to measure)"),
    ("demo", "", "profile a small bundled training loop, then analyse it"),
)
"""The top-level help's one list of commands: name, arguments, what it does (in this order)."""


class LazyGroup(OneLineErrors, click.Group):
    """A group whose heavier subcommands are imported only when they run (or show their help)."""

    lazy: ClassVar[dict[str, str]] = {
        "check": "torchdoctor.commands.check.cli:check_command",
        "tune": "torchdoctor.tune.cli:tune_command",
        "compare": "torchdoctor.compare.cli:compare_command",
        "fix": "torchdoctor.fix.cli:fix_command",
    }

    invoked: ClassVar[bool] = False
    """Whether a subcommand started. Until one does, only click's own output (``--help``,
    ``--version``) was made, and the console script may skip the interpreter's teardown."""

    def invoke(self, ctx: click.Context) -> object:
        LazyGroup.invoked = True
        return super().invoke(ctx)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            import importlib

            module, attr = self.lazy[cmd_name].split(":")
            cmd: click.Command = getattr(importlib.import_module(module), attr)
            cmd.name = cmd_name
            return cmd
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """One list: each command with its arguments and what it does (no second, shortened
        copy of the subcommands' docstrings)."""
        names = self.list_commands(ctx)
        order = [c for c in COMMANDS if c[0] in names]
        order += [(n, "", "") for n in names if n not in {c[0] for c in COMMANDS}]
        rows = [
            (f"{name} {args}".rstrip(), what or self._short_help(ctx, name))
            for name, args, what in order
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def _short_help(self, ctx: click.Context, name: str) -> str:
        cmd = self.get_command(ctx, name)
        return cmd.get_short_help_str(80) if cmd else ""


@click.group(cls=LazyGroup, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="torchdoctor")
def cli() -> None:
    """Find what makes a PyTorch workload slow on a GPU, and how to fix it.

    Run `torchdoctor COMMAND --help` for a command's options.
    """


@cli.command(cls=JsonPathCommand)
@click.argument("path", type=click.Path(path_type=str))
@json_option("the whole report")
@top_option("Rows in the kernel and operator tables.")
@click.option(
    "--jobs",
    "-j",
    default=None,
    type=click.IntRange(1, 4096),
    help="For a folder of ranks: worker processes, one rank each at a time [default: the CPUs].",
)
@click.option(
    "--scheduler",
    default=None,
    metavar="ADDRESS",
    help="For a folder of ranks: run the per-rank tasks on this Dask scheduler "
    "(tcp://host:8786); needs torchdoctor[dask] on the client and the workers.",
)
@click.option(
    "--dask", "use_dask", is_flag=True, help="Run the per-rank tasks on a local Dask cluster."
)
@html_option()
@click.option(
    "--export-trace",
    type=click.Path(path_type=str),
    help="Also write the trace plus torchdoctor's tracks (for ui.perfetto.dev).",
)
@guarded  # one error path for every command (statuses: torchdoctor.exits)
def analyze(
    path: str,
    json_path: str | None,
    top: int,
    jobs: int | None,
    scheduler: str | None,
    use_dask: bool,
    html_path: str | None,
    export_trace: str | None,
) -> None:
    """Diagnose a torch.profiler trace: a .json / .json.gz file, a folder of per-rank traces, or
    a `torchdoctor check` run folder."""
    from torchdoctor.commands.analyze.command import AnalyzeOptions, emit, run

    options = AnalyzeOptions(
        path, json_path, top, jobs, scheduler, use_dask, html_path, export_trace
    )
    emit(run(options), options)
    global _done_early
    # Everything is written and no cluster or pool is left to shut down: the console script
    # may skip the interpreter's teardown (about 40 ms of freeing numpy's and our modules).
    _done_early = not (scheduler or use_dask)


_done_early = False


def _skip_teardown() -> bool:
    """Nothing is left for the interpreter's teardown: ``analyze`` finished (``_done_early``), or
    no subcommand started (a command's open files and threads need the teardown)."""
    return _done_early or not LazyGroup.invoked


class NoInputJsonCommand(JsonPathCommand):
    """``demo``: no input arguments, so the word after ``--json`` is its PATH."""

    json_inputs_needed = 0


@cli.command(cls=NoInputJsonCommand)
@click.option(
    "--out",
    default="demo-output",
    type=click.Path(path_type=str, file_okay=False),
    metavar="DIRECTORY",
    help="Folder for the demo's trace.",
)
@click.option(
    "--steps",
    default=6,
    type=click.IntRange(2, 100),
    help="Profiled training steps.",
)
@json_option("the analysis of the demo's trace")
@guarded
def demo(out: str, steps: int, json_path: str | None) -> None:
    """Profile a small bundled training loop on the CPU, then analyse its trace."""
    from torchdoctor.capture.demo import run_demo
    from torchdoctor.commands.demo import demo_report
    from torchdoctor.json_arg import JSON_STDOUT, emit_json, json_target
    from torchdoctor.report.console import terminal_columns
    from torchdoctor.report.layout import fit
    from torchdoctor.report.render import render_json, render_text

    json_target(json_path, [])
    run = run_demo(out, steps=steps)
    report, busy = demo_report(run)  # the trace's report, and the machine's load while it ran
    # With the JSON on standard output, what would precede the report goes to stderr. A busy
    # machine is said above the report, in view: the shares below are that machine's.
    to_err = json_path == JSON_STDOUT
    busy_line = (
        f"{fit(busy, terminal_columns(sys.stderr if to_err else sys.stdout))}\n" if busy else ""
    )
    click.echo(f"wrote {run.trace}\n{busy_line}$ torchdoctor analyze {run.trace}\n", err=to_err)
    if not emit_json(render_json(report), json_path):
        render_text(report, top=8)


@cli.command(cls=JsonPathCommand)
@click.argument("snapshot", type=click.Path(path_type=str))
@json_option("the whole report")
@click.option(
    "--stream/--no-stream",
    default=None,
    help="Force the bounded-memory streaming reader on or off (default: on above 64 MiB).",
)
@html_option(help="Also write a self-contained HTML page (chart, fragmentation, sortable holders).")
@guarded
def memory(
    snapshot: str, json_path: str | None, stream: bool | None, html_path: str | None
) -> None:
    """Explain a CUDA memory snapshot (torch.cuda.memory._dump_snapshot) without importing torch."""
    from torchdoctor.commands.memory.command import MemoryOptions, emit, run

    options = MemoryOptions(snapshot, json_path, stream, html_path)
    emit(run(options), options)


def main() -> None:
    """The console script. Only here (never under click's test runner, which calls ``cli``)
    does a finished ``analyze``, ``--help`` or ``--version`` leave through ``os._exit`` once its
    output is flushed: the interpreter's teardown was a tenth of ``--help``'s instructions."""
    exits.console_script = True  # `check` runs the script in a child watched by this process
    try:
        cli(prog_name="torchdoctor")
    except SystemExit as exc:
        if not (_skip_teardown() and exc.code in (None, 0)):
            raise
    if _skip_teardown():
        import atexit

        atexit._run_exitfuncs()  # what was registered still runs; only the teardown is skipped
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:
            broken_pipe()
        except OSError as exc:  # a full or failing device: one line, the environment's status
            exits.output_failed(exits.STDOUT, exc)
        except ValueError:
            os._exit(EXIT_INTERNAL)
        os._exit(0)


if __name__ == "__main__":
    main()
