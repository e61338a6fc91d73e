"""What a ``check`` run actually measured, so that a short or failed run is never reported as
a clean bill of health.

The typed run record in, plain data out: used by the report and tested on hand-written
records.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from torchdoctor.record.run import RunRecord

Failure = Literal["syntax-error", "import-error", "crash"]
_SYNTAX = ("SyntaxError", "IndentationError", "TabError")
_IMPORT = ("ImportError", "ModuleNotFoundError")


@dataclass(frozen=True)
class Measurement:
    """How many steps the report rests on, and why fewer than requested when so."""

    requested_steps: int
    """Steps the options asked to measure after the warm-up (``--steps``)."""
    measured_steps: int
    """Steps after the warm-up that the script actually finished."""
    seen_steps: int
    """Every step seen, warm-up included."""
    complete: bool
    """True when the measured steps reached the requested ones."""
    failure: Failure | None
    """The script never ran its code: it did not parse, or an import failed."""
    note: str
    """One line for the report ('' when complete)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``report.json``."""
        return asdict(self)


def failure_kind(exception: str | None, phase: str | None = None) -> Failure | None:
    """``syntax-error`` / ``import-error`` from ``run.json``'s ``exit.exception`` line.

    With the recorded ``phase``, a SyntaxError is a parse error only when the script's own
    source did not compile (``phase == "parse"``); one raised while the script ran
    (``ast.literal_eval`` of a bad string) is not. Records without a phase keep the name rule."""
    name = (exception or "").split(":", 1)[0].strip()
    if name in _SYNTAX and phase in (None, "parse"):
        return "syntax-error"
    if name in _IMPORT:
        return "import-error"
    return None


def suggested_options(seen: int, requested: int, clean: int = 0) -> str:
    """Options that fit a window into ``seen`` steps (one warm-up step kept when possible);
    with ``clean`` steps asked, a clean window of at least 3 steps when there is room for one
    (one warm-up step, the clean ones, the profiler's own step, the profiled ones), else none."""
    if seen <= 0:
        return ""
    if clean > 0:
        steps = min(requested, max(1, seen - 5))
        fit = min(clean, seen - 2 - steps)
        if fit >= 3:
            return f"--warmup 1 --clean-steps {fit}" + (
                "" if steps == requested else f" --steps {steps}"
            )
        return (suggested_options(seen, requested) + " --clean-steps 0").strip()
    warmup = max(min(1, seen - 1), seen - requested)
    steps = min(requested, seen - warmup)
    return f"--warmup {warmup}" + ("" if steps == requested else f" --steps {steps}")


def _ending(record: RunRecord) -> str:
    status = record.exit_status
    if status == "error":
        return f"the script crashed ({record.exit_exception or 'an exception'})"
    if status == "interrupted":
        return "the script was interrupted"
    if status == "terminated":
        return "the script was terminated (SIGTERM)"
    if status == "timeout":
        return "the script was stopped at --timeout"
    if status in ("killed", "lost"):
        return f"the script's process ended abruptly ({record.exit_exception})"
    if status == "exited":
        return f"the script exited with status {record.exit_code}"
    return "the script ended"


def measure(record: RunRecord) -> Measurement:
    """What one rank's run record measured, with a note when it falls short."""
    requested = record.options.profile_steps
    measured = record.steps.measured_steps
    seen = record.steps.count
    failure = failure_kind(record.exit_exception, record.exit_phase)
    if failure is not None and seen == 0:
        what = "does not parse" if failure == "syntax-error" else "failed to import a module"
        note = f"the script {what}: {record.exit_exception}; nothing was measured"
        return Measurement(requested, measured, seen, False, failure, note)
    if seen == 0 and record.exit_status in ("error", "interrupted", "exited"):
        # a crash before the first step is a crash: no step advice, no findings
        note = f"{_ending(record)} before its first step; nothing was measured"
        return Measurement(requested, measured, seen, False, "crash", note)
    if measured >= requested:
        return Measurement(requested, measured, seen, True, None, "")
    hint = suggested_options(seen, requested, record.options.clean_steps)
    note = (
        f"{measured} step{'s' if measured != 1 else ''} measured of {requested} requested: "
        f"{_ending(record)} after {seen} step{'s' if seen != 1 else ''}"
        + (f"; try {hint}" if hint else "")
        + ". This is not a clean bill of health."
    )
    return Measurement(requested, measured, seen, False, None, note)
