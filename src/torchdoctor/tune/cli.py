"""``torchdoctor tune WORKLOAD.py``: search configurations, prove them, write the winner."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

import click

from torchdoctor.cli_options import CONTEXT, html_option, option_from
from torchdoctor.errors import UserError
from torchdoctor.exits import guarded
from torchdoctor.json_arg import JsonPathCommand, json_option, json_target
from torchdoctor.tune.options import TuneOptions, parse_duration
from torchdoctor.tune.space import KNOB_NAMES

D = TuneOptions()
"""The defaults every option below shows."""


def _knobs(text: str | None) -> tuple[str, ...] | None:
    if not text:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    for n in names:
        if n not in KNOB_NAMES:
            raise UserError(f"unknown knob {n!r} (choose from {', '.join(KNOB_NAMES)})")
    return names


_option = option_from(D)


@click.command("tune", cls=JsonPathCommand, context_settings=CONTEXT)
@click.argument("workload", type=click.Path(path_type=str))
@_option(
    "--budget",
    metavar="DURATION",
    help="Stop starting trials after this much time: 300, 90s, 5m, 1h.",
)
@_option(
    "--max-trials",
    type=click.IntRange(2, 10_000),
    help="At most this many trials (baseline twice included).",
)
@_option(
    "--knobs",
    help=f"Comma-separated knobs to search (default: all that apply): {', '.join(KNOB_NAMES)}.",
)
@_option(
    "--steps",
    type=click.IntRange(1, 100_000),
    help="Optimizer steps per configuration per round (one timed window).",
)
@_option(
    "--max-rounds",
    type=click.IntRange(6, 1000),
    help="Interleaved rounds per comparison at most (it stops earlier once the interval decides).",
)
@_option(
    "--warmup",
    type=click.IntRange(1, 10_000),
    help="Warm-up steps per trial (compile happens here).",
)
@_option(
    "--fidelity-steps",
    type=click.IntRange(1, 100_000),
    help="Steps whose loss must match the fp32 reference.",
)
@_option(
    "--min-gain",
    type=click.FloatRange(0.0, 0.9),
    help="Smallest relative speed-up that counts: a win needs its whole 95% interval above it.",
)
@_option(
    "--trial-timeout",
    metavar="DURATION",
    help="Kill a trial after this long (a hang): 300, 90s, 5m, 1h.",
)
@_option(
    "--nproc",
    type=click.IntRange(1, 64),
    help="Processes per trial; above 1 trials run under torchrun with DDP (bucket size searched).",
)
@_option("--seed", type=int, help="Seed for model init and data.")
@_option("--function", help="Workload function name, when the file has several.")
@_option("--db", type=click.Path(path_type=str), help="SQLite results file.")
@click.option("--resume", is_flag=True, help="Continue the latest run of this workload in --db.")
@json_option("the results")
@html_option()
@_option("--out", type=click.Path(path_type=str), help="Where to write the winning configuration.")
def tune_command(workload: str, **opts: Any) -> None:
    """Measure configurations of WORKLOAD.py side by side; keep the fastest faithful one."""
    guarded(_tune)(workload, TuneOptions(**opts))


def _settings(workload: str, opts: TuneOptions) -> dict[str, Any]:
    """What identifies a run: resuming with different values would mix incomparable trials."""
    return {
        "workload": str(Path(workload).resolve()),
        "function": opts.function,
        "steps": opts.steps,
        "max_rounds": opts.max_rounds,
        "warmup": opts.warmup,
        "fidelity_steps": opts.fidelity_steps,
        "min_gain": opts.min_gain,
        "seed": opts.seed,
        "nproc": opts.nproc,
        "knobs": _knobs(opts.knobs),
    }


def _open_run(store: Any, settings: dict[str, Any], resume: bool) -> int:
    if not resume:
        return int(store.new_run(settings["workload"], settings))
    latest = store.latest_run(settings["workload"])
    if latest is None:
        raise UserError(
            f"nothing to resume: no earlier run of {settings['workload']} in {store.path}"
        )
    run_id, saved = latest
    saved["knobs"] = tuple(saved["knobs"]) if saved.get("knobs") else None
    for key, value in settings.items():
        if saved.get(key) != value:
            raise UserError(
                f"cannot resume: --{key.replace('_', '-')} was {saved.get(key)!r}, now {value!r}"
            )
    return run_id


def _tune(workload: str, opts: TuneOptions) -> None:
    from torchdoctor.report.console import make_console
    from torchdoctor.tune import store

    settings, budget_s = _checked(workload, opts)
    console = make_console(stderr=opts.json_path == "-")
    if opts.resume and not Path(opts.db).is_file():
        raise UserError(f"cannot resume: {opts.db} does not exist (nothing to resume)")
    db = store.Store(opts.db)
    run_id = _open_run(db, settings, opts.resume)
    lock = store.RunLock(db.path, run_id).acquire(settings["workload"])
    try:
        _search(db, run_id, workload, opts, settings, budget_s, console)
    finally:
        lock.release()


def _search(
    db: Any,
    run_id: int,
    workload: str,
    opts: TuneOptions,
    settings: dict[str, Any],
    budget_s: float | None,
    console: Any,
) -> None:
    from torchdoctor.tune import diagnosis, report, store
    from torchdoctor.tune.search import BaselineFailed, Search, Settings

    runner = _runner(workload, opts, run_id)
    live = _Live(console, runner)
    search = Search(
        store.StoredRunner(db, run_id, live),
        Settings(
            budget_s,
            opts.max_trials,
            opts.min_gain,
            opts.fidelity_steps,
            settings["knobs"],
        ),
        diagnose=lambda result: _diagnose_once(db, run_id, result, diagnosis.diagnose),
        on_record=live.record,
    )
    live.search = search
    previous = _on_sigterm(_terminated)
    try:
        summary = search.run()
    except BaselineFailed as exc:
        raise UserError(str(exc)) from None
    except Terminated:
        _interrupted(workload, opts, len(search.records), code=143, why="terminated")
    except KeyboardInterrupt:
        _interrupted(workload, opts, len(search.records))
    finally:
        _on_sigterm(previous)
        db.close()
    report.render_table(summary, console)
    _write_outputs(summary, runner, opts, console)


_RESUME_OPTS = (
    "budget",
    "max_trials",
    "knobs",
    "steps",
    "max_rounds",
    "warmup",
    "fidelity_steps",
    "min_gain",
    "seed",
    "nproc",
    "function",
    "db",
)


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, a job scheduler): raised in the main thread like Ctrl-C's
    KeyboardInterrupt, so the trial runner's cleanup kills the running trial's process group (a
    trial runs in its own session: the signal never reaches it, and it would keep the GPU)."""


def _terminated(signum: int, frame: Any) -> None:
    raise Terminated()


def _on_sigterm(handler: Any) -> Any:
    """Install ``handler`` for SIGTERM; the previous one (None outside the main thread, where
    Python cannot set handlers, or when ``handler`` is None)."""
    if handler is None:
        return None
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return None


def _interrupted(
    workload: str,
    opts: TuneOptions,
    trials: int,
    *,
    code: int = 130,
    why: str = "interrupted",
) -> None:
    """Ctrl-C or SIGTERM: every finished trial is saved; say how to continue, exit 128 + the
    signal (130 for SIGINT, 143 for SIGTERM)."""
    import shlex

    args = ["tune", workload]
    for name in _RESUME_OPTS:  # the settings a resumed run must repeat, plus the limits
        if getattr(opts, name) is not None:
            args += [f"--{name.replace('_', '-')}", str(getattr(opts, name))]
    click.echo(
        f"\ntorchdoctor: {why} after {trials} trials (all saved in {opts.db}); "
        f"continue with: torchdoctor {shlex.join(args)} --resume",
        err=True,
    )
    sys.exit(code)


def _checked(workload: str, opts: TuneOptions) -> tuple[dict[str, Any], float | None]:
    """Validate everything before the first trial: (run settings, budget in seconds or None)."""
    from torchdoctor.tune.workload import check_file

    check_file(workload, opts.function)
    json_target(opts.json_path, [workload, opts.db, opts.out])
    budget_s = parse_duration(opts.budget) if opts.budget else None
    parse_duration(opts.trial_timeout)
    if opts.fidelity_steps > 6 * opts.steps + opts.warmup:
        raise UserError(
            "--fidelity-steps must be at most --warmup + 6 x --steps (the steps every trial runs)"
        )
    return _settings(workload, opts), budget_s


def _runner(workload: str, opts: TuneOptions, run_id: int) -> Any:
    from torchdoctor.tune.runner import TrialRunner

    workdir = Path(opts.db).parent / f"run-{run_id}"
    workdir.mkdir(parents=True, exist_ok=True)
    return TrialRunner(
        workload, opts, workdir=str(workdir), env=_compile_cache_env(Path(opts.db).parent)
    )


def _compile_cache_env(folder: Path) -> dict[str, str]:
    import os

    # A shared inductor cache: the first compiled trial pays the cold compile, later ones (and a
    # resumed run) pay what a user's second run pays.
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return {}
    return {"TORCHINDUCTOR_CACHE_DIR": str((folder / "inductor-cache").resolve())}


def _diagnose_once(db: Any, run_id: int, result: Any, diagnose: Any) -> list[str]:
    saved = db.finding_ids(run_id)
    if saved is not None:
        return list(saved)
    ids = list(diagnose(result))
    db.save_finding_ids(run_id, ids)
    return ids


def _write_outputs(summary: Any, runner: Any, opts: TuneOptions, console: Any) -> None:
    from rich.markup import escape

    from torchdoctor.inputs import write_output
    from torchdoctor.tune import report
    from torchdoctor.tune.space import to_config

    best = summary.best
    config = to_config(best.trial.assignment, batch_size=runner.batch_size, seed=opts.seed)
    config.seed = None  # the tuner's seed made trials comparable; training keeps its own
    what = (
        f"{report.claim_text(summary)} the fp32 eager baseline's speed (95% interval over "
        "interleaved rounds), loss within the fidelity tolerance"
        if summary.claim
        else f"the fp32 eager baseline: no configuration was faster by more than {opts.min_gain:.0%}"
    )
    note = (
        f"Written by torchdoctor tune for {Path(runner.workload).name}: {what}.\n"
        f"Load it with torchdoctor.Runtime.from_file(...)."
    )
    out = config.save(opts.out, comment=note)
    console.print(f"wrote {escape(str(out))}")
    if opts.json_path == "-":
        click.echo(report.to_json(summary))
    elif opts.json_path:
        write_output(opts.json_path, report.to_json(summary), "JSON report")
        console.print(f"wrote {escape(opts.json_path)}")
    if opts.html_path:
        import json

        from torchdoctor.report.html_sources import write_tune_html

        data = json.loads(report.to_json(summary))
        console.print(f"wrote {write_tune_html(opts.html_path, data, runner.workload)}")


class _Live:
    """Runs trials under a rich status spinner and prints one line as each finishes."""

    def __init__(self, console: Any, runner: Any) -> None:
        self.console, self.runner = console, runner
        self.search: Any = None
        self.started = time.perf_counter()
        self.best: Any = None

    def __call__(self, trial: Any) -> Any:
        from rich.markup import escape

        from torchdoctor.tune.report import describe

        n = len(self.search.records) + 1 if self.search else 1
        what = escape(f"trial {n}: {trial.phase} {describe(trial.assignment)} …")
        with self.console.status(what):
            return self.runner(trial)

    def _total_hint(self) -> int:
        s = self.search
        if s is None or s.space is None:
            return 2
        singles = sum(len(k.values) - 1 for k in s.space.top_level())
        hint = 2 + singles + max(0, len(s.space.top_level()) - 1)
        return min(hint, s.settings.max_trials or hint)

    def record(self, rec: Any) -> None:
        """Print the progress line of a finished (or replayed) trial; learn the global batch."""
        from torchdoctor.tune.report import progress_line

        if rec.result.probe and self.runner.batch_size is None:
            self.runner.batch_size = int(rec.result.probe.get("batch_size") or 0) or None
        if rec.wins and (self.best is None or rec.speedup > self.best.speedup):
            self.best = rec
        elapsed = time.perf_counter() - self.started
        self.console.print(
            progress_line(rec, max(self._total_hint(), rec.seq + 1), self.best, elapsed)
        )


if __name__ == "__main__":
    tune_command.main(args=sys.argv[1:], prog_name="torchdoctor tune")
