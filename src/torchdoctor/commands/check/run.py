"""``check`` as a function: run a script (or a callable) under watch, then publish rank 0's
report; the command line (``cli.py``) and ``torchdoctor.check`` both call ``run_check``."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchdoctor.errors import UserError
from torchdoctor.record import layout

if TYPE_CHECKING:
    from torchdoctor.commands.check.report_doc import CheckReport
    from torchdoctor.record.run import RunRecord
    from torchdoctor.rules.finding import Finding

PathLike = str | Path


@dataclass(frozen=True)
class CheckResult:
    """What ``check`` saw: the exit status, the run folder and the report written there."""

    exit_code: int
    """The script's own exit status (0 when the function returned or was stopped by check)."""
    folder: Path
    """The run folder (``run.json``, ``report.json``, ``report.txt``, the trace)."""
    record: dict[str, Any]
    """This process's ``run.json`` document as written (steps, settings seen, run-level
    findings); ``run`` is the same record typed."""
    report: dict[str, Any] | None
    """``report.json`` (None on ranks other than 0, which write no report)."""
    text: str
    """``report.txt``: the report as printed by ``torchdoctor check``."""

    @property
    def findings(self) -> list[Finding]:
        """The merged findings (trace and run level), the largest saving first."""
        from torchdoctor.commands.check.report_doc import finding_from_dict

        source = self.report if self.report is not None else self.record
        return [finding_from_dict(d) for d in source.get("findings", [])]

    @property
    def summary(self) -> CheckReport | None:
        """``report.json`` typed (``summary.verdict``, ``summary.findings``,
        ``summary.account.explained``, ``summary.measurement.measured_steps``); None on ranks
        other than 0, which write no report."""
        from torchdoctor.commands.check.report_doc import CheckReport

        return None if self.report is None else CheckReport.from_dict(self.report)

    @property
    def run(self) -> RunRecord:
        """The ``run.json`` record typed (``run.steps.count``, ``run.exit_status``,
        ``run.compile.recompiles``...), as the run rules, ``compare`` and ``fix`` read it."""
        from torchdoctor.record.run import RunRecord

        return RunRecord.from_dict(self.record)

    @property
    def steps(self) -> dict[str, Any]:
        """Step counts and times (ms) as recorded in ``run.json`` (``run.steps`` has them
        typed)."""
        return dict(self.run.recorded("steps") or {})

    def __str__(self) -> str:
        return self.text


def run_check(
    target: PathLike | Callable[[], Any],
    args: list[str],
    options: Any,
    *,
    echo: bool = True,
    top: int = 10,
    json_path: str | None = None,
    html_path: str | None = None,
) -> CheckResult:
    """``check`` with a built ``CheckOptions``; ``echo`` prints the report (the CLI's way);
    ``json_path`` as for ``torchdoctor check --json`` (``"-"``: only JSON on stdout)."""
    from torchdoctor.capture.evidence import EvidenceLog, evidence_path
    from torchdoctor.capture.runfolder import RankInfo
    from torchdoctor.capture.runner import check_callable, check_script, internal_error
    from torchdoctor.commands.check.args import checked_outputs
    from torchdoctor.commands.check.publish import publish
    from torchdoctor.exits import EXIT_INTERNAL, EXIT_OUTPUT, say, told_output_failure

    # Where the report goes is checked (and made absolute) before the run: a typo must not cost
    # a training run, and a script that changes its working directory must not move it.
    json_path, html_path = checked_outputs(json_path, html_path)
    if callable(target):
        code, folder, record = check_callable(target, options)
    else:
        code, folder, record = check_script(
            str(target), args, options, quiet_stdout=json_path == "-"
        )
    report, text = None, ""
    if RankInfo.from_env().rank == 0:
        try:
            quiet = contextlib.redirect_stdout(io.StringIO())
            with contextlib.nullcontext() if echo else quiet:
                report = publish(
                    folder,
                    record,
                    RankInfo.from_env(),
                    options,
                    top,
                    json_path=json_path,
                    html_path=html_path,
                )
            text = layout.report_text(folder).read_text(encoding="utf-8")
            EvidenceLog(evidence_path(folder, RankInfo.from_env())).published()
        except UserError as exc:  # an output that could not be written: one line, exit 74
            say(f"torchdoctor: error: {exc}")
            code = code or exc.exit_code
            _published(folder)  # the watching parent would fail the same way
        except Exception as exc:
            if told_output_failure(exc):  # standard output on a full device: one line
                code = code or EXIT_OUTPUT
                _published(folder)
            else:
                if os.environ.get("TORCHDOCTOR_DEBUG"):
                    raise
                internal_error("while writing the report", exc)
                code = code or EXIT_INTERNAL  # the script's own status first, ours if none
    return CheckResult(code, folder, record, report, text)


def _published(folder: Path) -> None:
    from torchdoctor.capture.evidence import EvidenceLog, evidence_path
    from torchdoctor.capture.runfolder import RankInfo

    EvidenceLog(evidence_path(folder, RankInfo.from_env())).published()
