"""``torchdoctor check`` from a parent process: whatever ends the script, the run is reported.

The command forks before anything is imported for the run: the child runs the script under watch
as before (and normally writes the record and the report itself); the parent only waits. If the
child dies without writing its record (``os._exit``, a segfault, SIGKILL from the out-of-memory
killer or from us), the parent rebuilds the record from the evidence the child wrote as it went
(``capture/evidence.py``) and publishes the report: the steps measured so far, and how the
process ended. The parent exits with the child's status; when a signal ended the script (a
segfault, SIGKILL, SIGTERM, Ctrl-C's SIGINT), the parent, once the report is out, ends by that
same signal (``exits.end_by_signal``, no core dump of its own), so a supervisor (torchrun's
agent, Slurm, a CI runner, a shell) sees the death the script had; the report says which.

Signals: SIGTERM to the parent is forwarded to the child (which ends the script as Ctrl-C does);
if the child is still alive ``GRACE_S`` later it is killed. Ctrl-C at a terminal reaches both
processes, so the parent does not forward it again; sent to the parent alone, it is forwarded.
``--timeout``: the child stops the script itself when the time is up; the parent kills it
``GRACE_S`` after that if it has not ended (a script stuck in a C call never returns to Python).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchdoctor.capture.evidence import evidence_path, read_evidence, record_from_evidence
from torchdoctor.capture.options import CheckOptions
from torchdoctor.capture.runfolder import RankInfo, create_run_folder, rank_result_path, write_json
from torchdoctor.errors import UserError
from torchdoctor.exits import EXIT_OUTPUT, EXIT_TIMEOUT, say, told_output_failure
from torchdoctor.record.run import RunRecord

ENV_WATCHER = "TORCHDOCTOR_WATCHER"
"""0: run the script in this process only (no watching parent)."""
GRACE_S = 15.0
_POLL_S = 0.05


def available() -> bool:
    """Whether ``check`` runs under a watching parent: in the console script, where fork exists,
    unless ``TORCHDOCTOR_WATCHER=0``."""
    from torchdoctor import exits

    return exits.console_script and hasattr(os, "fork") and os.environ.get(ENV_WATCHER) != "0"


@dataclass(frozen=True)
class Ending:
    """How the watching parent leaves once the run is reported."""

    code: int
    """The exit status, as a shell shows it (128 + N for a signal N)."""
    signum: int | None = None
    """The signal that ended the script, if one did: the parent ends by it too."""


def fork_watched(
    script: str,
    options: CheckOptions,
    top: int,
    json_path: str | None,
    html_path: str | None,
) -> tuple[Ending | None, Path]:
    """Create the run folder, fork: in the child return ``(None, folder)`` (go on and run the
    script); in the parent wait for the child and return ``(how to end, folder)``."""
    rank = RankInfo.from_env()
    # The folder is made here, before the fork: ranks find it through a pointer keyed by the
    # torchrun agent's pid, which is this process's parent (the child's would be us).
    folder = create_run_folder(options.out_dir, script, rank)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    pid = os.fork()
    if pid == 0:
        return None, folder
    status = _wait(pid, options)
    return _after(status, folder, rank, options, top, json_path, html_path), folder


class _Waiter:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.term_at: float | None = None
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_int)

    def _on_term(self, signum: int, frame: Any) -> None:
        if self.term_at is None:
            self.term_at = time.monotonic()
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)

    def _on_int(self, signum: int, frame: Any) -> None:
        # At a terminal the child got this Ctrl-C too; sent to us alone, pass it on.
        with contextlib.suppress(OSError):
            if os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp():
                return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGINT)


def _wait(pid: int, options: CheckOptions) -> dict[str, Any]:
    """Wait for the child; kill it when it outlives the timeout or a SIGTERM by ``GRACE_S``."""
    waiter = _Waiter(pid)
    start = time.monotonic()
    killed_for = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        now = time.monotonic()
        late_timeout = options.timeout_s is not None and now > start + options.timeout_s + GRACE_S
        late_term = waiter.term_at is not None and now > waiter.term_at + GRACE_S
        if killed_for is None and (late_timeout or late_term):
            killed_for = "timeout" if late_timeout else "terminated"
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(_POLL_S)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL if sig == signal.SIGTERM else signal.default_int_handler)
    code = os.waitstatus_to_exitcode(status)
    return {"code": code, "killed_for": killed_for}


def _exit_info(code: int, killed_for: str | None, options: CheckOptions) -> dict[str, Any]:
    """``run.json``'s ``exit`` for a process that ended without writing its record."""
    if killed_for == "timeout":
        return {
            "status": "timeout",
            "code": EXIT_TIMEOUT,
            "exception": f"still running {GRACE_S:.0f} s after --timeout {options.timeout_s:g}: "
            "killed (stuck outside Python?)",
        }
    if killed_for == "terminated":
        return {
            "status": "terminated",
            "code": 143,
            "exception": f"still running {GRACE_S:.0f} s after SIGTERM: killed",
        }
    if code < 0:
        name = signal.Signals(-code).name
        hint = " (the out-of-memory killer sends SIGKILL)" if name == "SIGKILL" else ""
        return {"status": "killed", "code": 128 - code, "exception": f"killed by {name}{hint}"}
    return {
        "status": "lost",
        "code": code,
        "exception": f"the process exited with status {code} before torchdoctor could write "
        "its record (os._exit?)",
    }


def _after(
    status: dict[str, Any],
    folder: Path,
    rank: RankInfo,
    options: CheckOptions,
    top: int,
    json_path: str | None,
    html_path: str | None,
) -> Ending:
    """Write what the child could not, publish if it did not; how to leave."""
    code, killed_for = status["code"], status["killed_for"]
    exit_status = 128 - code if code < 0 else code
    evidence = read_evidence(evidence_path(folder, rank))
    record_file = rank_result_path(folder, rank)
    ended = None
    try:
        if not evidence["record_written"]:
            info = _exit_info(code, killed_for, options)
            exit_status = int(info["code"])
            from torchdoctor.rules.run_rules import run_findings

            rebuilt = record_from_evidence(evidence, info)
            record = {**rebuilt, "findings": [f.to_dict() for f in run_findings(rebuilt)]}
            write_json(record_file, record)
            n = RunRecord.from_dict(record).steps.count
            say(
                f"torchdoctor: {info['exception']}; reporting the {n} step"
                f"{'' if n == 1 else 's'} measured before that"
            )
        if rank.rank == 0 and not evidence["published"]:
            from torchdoctor.commands.check.publish import publish

            record = json.loads(record_file.read_text(encoding="utf-8"))
            publish(folder, record, rank, options, top, json_path=json_path, html_path=html_path)
        ended = RunRecord.from_dict(json.loads(record_file.read_text(encoding="utf-8"))).exit_status
    except UserError as exc:  # an output that could not be written (a full disk): one line
        say(f"torchdoctor: error: {exc}")
        exit_status = exit_status or exc.exit_code
    except Exception as exc:  # the script's status stands; our failure is one line
        if told_output_failure(exc):  # standard output on a full device
            exit_status = exit_status or EXIT_OUTPUT
        elif os.environ.get("TORCHDOCTOR_DEBUG"):
            raise
        else:
            say(f"torchdoctor: internal error while reporting the run: {type(exc).__name__}: {exc}")
    return Ending(exit_status, ending_signal(code, killed_for, ended))


def ending_signal(code: int, killed_for: str | None, ended: str | None) -> int | None:
    """The signal that ended the script, or None: ``code`` is the child's status as
    ``os.waitstatus_to_exitcode`` gives it (-N for a signal N), ``killed_for`` why the parent
    killed it, if it did, ``ended`` the record's ``exit.status``.

    A child the parent killed at ``--timeout`` was stopped by check (exit 124, no signal). A
    SIGTERM or a Ctrl-C stopped the script as an exception (its ``finally`` blocks ran) and
    the child exited 143 or 130; without check, python would have died by the signal (Python
    itself ends by SIGINT after an uncaught KeyboardInterrupt).
    """
    if killed_for == "timeout":
        return None
    if killed_for == "terminated":
        return signal.SIGTERM
    if code < 0:
        return -code
    if ended == "terminated" and code == 128 + signal.SIGTERM:
        return signal.SIGTERM
    if ended == "interrupted" and code == 128 + signal.SIGINT:
        return signal.SIGINT
    return None
