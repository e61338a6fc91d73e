"""What both framework callbacks share: a ``check`` session started and finished by the
framework's own hooks instead of by running a script.

The session is ``check``'s (optimizer-step and DataLoader hooks, the profiled window, compile,
sync and configuration probes); it never stops training (``full``). At the end of training it
writes the same run folder and report, with the framework's settings recorded and the fixes
phrased in them.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchdoctor.capture.options import CheckOptions
from torchdoctor.commands.check.args import check_options
from torchdoctor.record import layout
from torchdoctor.record.run import RunRecord


@dataclass(frozen=True)
class WatchResult:
    """What a callback leaves behind at the end of training."""

    folder: Path
    """The run folder (``run.json`` / ``ranks/``, ``report.json``, ``report.txt``, trace)."""
    record: dict[str, Any]
    """This rank's ``run.json`` record."""
    report: dict[str, Any] | None
    """``report.json`` (rank 0 only)."""
    headline: str
    """One line for the trainer's logger: step time and the fix worth most."""

    @property
    def run(self) -> RunRecord:
        """This rank's record, typed."""
        return RunRecord.from_dict(self.record)


class WatchingCallback:
    """What each framework's ``DoctorCallback`` does from the framework's hooks: start and
    finish a ``RunWatch``, keep its result; a failure of ours is a note and training goes on."""

    framework = ""
    """The framework's name in the run record (and in the fixes' wording)."""

    def __init__(
        self,
        warmup_steps: int = 5,
        profile_steps: int = 5,
        out_dir: str | Path = "torchdoctor-runs",
        **options: Any,
    ) -> None:
        # Like check's options, but training always runs to its end (full).
        self.options = check_options(
            "DoctorCallback", warmup_steps, profile_steps, out_dir, True, **options
        )
        self.result: WatchResult | None = None
        """What the last training run left (set when training ends)."""
        self._watch: RunWatch | None = None

    def _begin(self, where: str, name: str, loaders: Callable[[], Iterable[Any]]) -> None:
        """Install the hooks (the run folder named after the script, else ``name``)."""
        try:
            from torchdoctor.capture.hooks import loader_settings

            self._watch = RunWatch(self.framework, self.options, run_name(name))
            self._watch.start()
            hooks = self._watch.session.hooks
            # A loader built, or its first iterator started, before our hooks: read it now.
            for loader in loaders():
                if hasattr(loader, "num_workers"):
                    hooks.loaders.setdefault(id(loader), loader_settings(loader))
        except Exception as exc:  # a guest never breaks the training it watches
            guest_failed(where, exc)

    def _end(
        self,
        where: str,
        info: Callable[[], dict[str, Any]],
        log: Callable[[WatchResult], None],
        status: str = "completed",
    ) -> None:
        """Write the run (``info``: the framework's settings) and ``log`` what it left; once."""
        if self._watch is None or not self._watch.active:
            return
        try:
            self.result = self._watch.finish(info(), status)
            log(self.result)
        except Exception as exc:
            guest_failed(where, exc)


def announce(result: WatchResult, log: Callable[[str], Any]) -> None:
    """The headline to the framework's ``log``, where the report is to standard error."""
    log(result.headline)
    say(f"torchdoctor: report in {layout.report_text(result.folder)}")


class RunWatch:
    """One watched training run, started and finished by a framework callback."""

    def __init__(self, framework: str, options: CheckOptions, name: str) -> None:
        self.framework = framework
        self.options = options
        self.name = name
        self.session: Any = None
        self.aside = False
        """True when ``torchdoctor check`` already watches this process: the callback steps
        aside (one set of hooks, one report: check's, phrased in the framework's settings)."""

    @property
    def active(self) -> bool:
        """Between ``start`` and ``finish``."""
        return self.session is not None

    def start(self) -> None:
        """Create the run folder and install every hook (the first step starts now); under
        ``torchdoctor check``, step aside and let its session watch."""
        from torchdoctor.capture import guest
        from torchdoctor.capture.runfolder import RankInfo, create_run_folder
        from torchdoctor.capture.session import Session

        active = guest.active_session()
        if active is not None:
            self.session, self.aside = active, True
            active.framework = {"name": self.framework}
            say(
                f"torchdoctor: {self.framework} DoctorCallback steps aside: torchdoctor check "
                "is watching this run and writes the report"
            )
            return
        rank = RankInfo.from_env()
        folder = create_run_folder(self.options.out_dir, self.name, rank)
        self.session = Session(self.options, folder, rank)
        self.session.install()

    def finish(self, framework_info: dict[str, Any], status: str = "completed") -> WatchResult:
        """Remove the hooks, write this rank's record and, on rank 0, the report."""
        from torchdoctor.capture.runfolder import rank_result_path, write_json
        from torchdoctor.capture.runner import Outcome, finish_record

        session, self.session = self.session, None
        if self.aside:
            self.aside = False
            session.framework = {"name": self.framework, **framework_info}
            line = (
                f"torchdoctor: torchdoctor check writes the report of this run in {session.folder}"
            )
            return WatchResult(session.folder, {}, None, line)
        session.uninstall()
        outcome = Outcome(status, 0 if status == "completed" else 1)
        record = {
            **finish_record(session, outcome, self.name, []),
            "framework": {"name": self.framework, **framework_info},
            "frameworks": [],  # the callback is in use: no hint to add it
        }
        write_json(rank_result_path(session.folder, session.rank), record)
        report = None
        if session.rank.rank == 0:
            report = self._publish(session, record)
        return WatchResult(session.folder, record, report, headline(record, report))

    def _publish(self, session: Any, record: dict[str, Any]) -> dict[str, Any] | None:
        from torchdoctor.capture.runner import internal_error
        from torchdoctor.commands.check.publish import publish
        from torchdoctor.rules.framework_advice import rewriter

        try:
            # The report goes to report.txt; the trainer's logger gets the headline.
            with contextlib.redirect_stdout(io.StringIO()):
                return publish(
                    session.folder,
                    record,
                    session.rank,
                    self.options,
                    advise=rewriter(self.framework),
                )
        except Exception as exc:  # our bug must not end the user's training run
            if os.environ.get("TORCHDOCTOR_DEBUG"):
                raise
            internal_error("while writing the report", exc)
            return None


def headline(record: dict[str, Any], report: dict[str, Any] | None) -> str:
    """Median step time and the finding worth most (or that none was found)."""
    run = RunRecord.from_dict(record)
    effect = (report or {}).get("probe_effect") or {}
    clean = effect.get("clean_ms")
    median = run.steps.median_step_ms
    if isinstance(clean, int | float):  # the step with no instrument armed
        head = f"{run.steps.count} steps, median {clean:.1f} ms (clean)"
    else:
        head = f"{run.steps.count} steps" + (
            f", median {median:.1f} ms" if median is not None else ""
        )
    findings = (report.get("findings") if report else run.findings) or []
    worth = [f for f in findings if f.get("severity") != "info"]
    if not worth:
        return f"torchdoctor: {head}; no bottleneck worth fixing found"
    return f"torchdoctor: {head}; fix first: {worth[0]['title']}"


def run_name(fallback: str) -> str:
    """The run folder's name: the script that runs the training (``train.py`` -> ``train``),
    as ``check`` names it; ``fallback`` (the model's class) in a notebook or an interpreter."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv and sys.argv[0] else "")
    stem = Path(path).stem if path else ""
    if not stem or stem in ("-c", "ipykernel_launcher", "__main__", "pytest", "python"):
        return fallback
    return stem


def guest_failed(where: str, exc: BaseException) -> None:
    """A callback of ours failed: say so in one line, keep training (the traceback with
    ``TORCHDOCTOR_DEBUG=1``)."""
    from torchdoctor.capture import guest

    if os.environ.get("TORCHDOCTOR_DEBUG"):
        raise exc
    guest.note(where, exc)
    say(f"torchdoctor: {where} failed ({type(exc).__name__}: {exc}); training goes on without it")


def say(line: str) -> None:
    """Print a line on standard error (rank 0 only), where ``check`` prints its progress."""
    if os.environ.get("RANK", "0") == "0":
        print(line, file=sys.stderr)
