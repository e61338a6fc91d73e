"""What ``fix`` prints: the summary (text), and the JSON document (``torchdoctor.fix``, v1)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from torchdoctor.fix.model import STATUS_WORDS, Change, Measured
from torchdoctor.fix.planner import Plan, patch_of
from torchdoctor.fix.prove import Proof
from torchdoctor.fix.sources import relative
from torchdoctor.record.run import RunRecord
from torchdoctor.tune.fidelity import Fidelity

SCHEMA, SCHEMA_VERSION = "torchdoctor.fix", 1
ONE_TIME_S = 0.5  # a warm-up this much longer is worth saying (compilation, worker start-up)


@dataclass(frozen=True)
class ScriptFailure:
    """How the checked script ended when it did not end well (``run.json``'s ``exit``)."""

    status: str
    """``error``, ``exited``, ``killed``...: the record's ``exit.status``."""
    code: int
    """The script's own exit status (128 + N for signal N): fix exits with it."""
    exception: str = ""
    steps: int = 0
    """Steps the script took before it ended."""

    @classmethod
    def of(cls, record: RunRecord) -> ScriptFailure | None:
        """The failure the run's record tells of, None when the script ended well."""
        code = record.exit_code
        if code is None or code == 0:
            return None
        return cls(
            status=str(record.exit_status or "exited"),
            code=code if 0 < code < 256 else 1,
            exception=record.exit_exception or "",
            steps=record.steps.count,
        )

    def text(self) -> str:
        """``the script failed before its first step (exit: error, code 1): RuntimeError: ...``"""
        when = "before its first step" if self.steps == 0 else f"after {self.steps} step(s)"
        head = f"the script failed {when} (exit: {self.status}, code {self.code})"
        return f"{head}: {self.exception}" if self.exception else head


@dataclass(frozen=True)
class FixResult:
    """Everything one ``fix`` run decided, ready to print, serialise or draw."""

    plan: Plan
    script: str | None
    run_folder: str | None
    proof: Proof | None = None
    written: list[tuple[str, str]] = field(default_factory=list)
    """(file, backup) per file ``--write`` wrote."""
    notes: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    failure: ScriptFailure | None = None
    """The script of the run ended with an error (``run.json``'s ``exit``); fix exits with its
    status."""

    @property
    def kept(self) -> list[Change]:
        return self.plan.patched

    @property
    def patch(self) -> str:
        """The unified diff of the changes kept."""
        return patch_of(self.plan, self.kept)


def predicted_text(c: Change) -> str:
    f = c.finding
    sp = f.predicted_speedup
    if sp is None or f.step_ms is None:
        return "no saving estimated"
    return f"{sp:.2f}x (saves {f.saving_ms_per_step:.1f} of {f.step_ms:.1f} ms per step)"


def measured_text(m: Measured | None) -> str:
    if m is None:
        return "not measured"
    text = f"{m.format()} over {m.rounds} rounds ({m.original_ms:.1f} -> {m.patched_ms:.1f} ms per step)"
    if m.warmup_extra_s >= ONE_TIME_S:
        text += f"; +{m.warmup_extra_s:.1f} s once, in the warm-up (not in the ratio)"
    return text


def fidelity_text(f: Fidelity | None) -> str:
    if f is None:
        return ""
    if f.steps == 0:
        return f.reason
    if f.ok:
        return f"losses of {f.steps} steps within {f.tolerance:.0e} (largest deviation {f.max_rel_dev:.1e})"
    return f.reason


def command_text(script: str | None, args: tuple[str, ...], cwd: str) -> str:
    """``python train.py --compile=True``: the run's command line with a switch set."""
    import shlex

    name = relative(script, cwd) if script else "SCRIPT"
    return shlex.join(["python", name, *args])


def summary_lines(result: FixResult, width: int | None = None) -> list[str]:
    """The summary printed on standard error (the diff itself goes to standard output), its
    lines wrapped at their spaces to ``width`` columns (None: whole, for a log)."""
    from torchdoctor.report.layout import fit

    return fit("\n".join(_summary_lines(result)), width, code_indent=None).split("\n")


def _summary_lines(result: FixResult) -> list[str]:
    plan = result.plan
    counts: dict[str, int] = {}
    for c in plan.changes:
        counts[c.status] = counts.get(c.status, 0) + 1
    head = (
        ", ".join(f"{n} {STATUS_WORDS[s]}" for s, n in sorted(counts.items()))
        or "nothing to change"
    )
    findings = len({c.finding.id for c in plan.changes})
    failure = result.failure
    if failure is not None and failure.steps == 0 and not plan.changes:
        lines = [f"torchdoctor fix: {failure.text()}; no step ran, so there is nothing to fix"]
    else:
        lines = [f"torchdoctor fix: {findings} finding(s) with a code remedy; {head}"]
        if failure is not None:
            lines.append(f"torchdoctor fix: {failure.text()}")
    for c in plan.changes:
        where = f"{relative(c.file, plan.cwd)}:{c.line}" if c.file and c.line else "-"
        also = f" (+{', '.join(c.also)})" if c.also else ""
        lines.append(
            f" {c.id} {STATUS_WORDS[c.status]:<17} {c.finding.id}{also} -> {c.codemod} at {where}"
        )
        if c.summary:
            lines.append(f"      {c.summary}")
        if c.switch is not None:
            lines.append(f"      run: {command_text(result.script, c.switch.args, plan.cwd)}")
        if c.target is not None or c.switch is not None:
            lines.append(f"      predicted: {predicted_text(c)}")
        if c.measured is not None or c.fidelity is not None:
            lines.append(f"      measured:  {measured_text(c.measured)}")
            if c.fidelity is not None:
                lines.append(f"      fidelity:  {fidelity_text(c.fidelity)}")
        if c.reason:
            lines.append(f"      why: {c.reason}")
    p = result.proof
    if p is not None and p.together is not None:
        lines.append(
            f" all together ({', '.join(p.together_ids)}): {measured_text(p.together)}; "
            f"{fidelity_text(p.together_fidelity)}"
        )
    for path, backup in result.written:
        lines.append(
            f"wrote {relative(path, plan.cwd)} (original kept as {relative(backup, plan.cwd)})"
        )
    lines += result.notes
    return lines


def _measured(m: Measured | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "ratio": m.ratio,
        "low": m.low if m.low > 0 else None,
        "high": m.high if math.isfinite(m.high) else None,
        "rounds": m.rounds,
        "original_ms": m.original_ms,
        "patched_ms": m.patched_ms,
        "warmup_extra_s": m.warmup_extra_s,
    }


def _fidelity(f: Fidelity | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {
        "ok": f.ok,
        "steps": f.steps,
        "max_rel_dev": f.max_rel_dev if math.isfinite(f.max_rel_dev) else None,
        "tolerance": f.tolerance,
        "reason": f.reason,
    }


def change_dict(c: Change, cwd: str) -> dict[str, Any]:
    f = c.finding
    return {
        "id": c.id,
        "finding": f.id,
        "also": list(c.also),
        "codemod": c.codemod,
        "file": relative(c.file, cwd) if c.file else None,
        "line": c.line,
        "status": c.status,
        "reason": c.reason,
        "summary": c.summary,
        "precision": c.precision,
        "predicted": {
            "saving_ms_per_step": f.saving_ms_per_step,
            "step_ms": f.step_ms,
            "speedup": f.predicted_speedup,
        },
        "measured": _measured(c.measured),
        "fidelity": _fidelity(c.fidelity),
        "diff": c.diff,
        "switch": None
        if c.switch is None
        else {
            "setting": c.switch.setting,
            "file": relative(c.switch.file, cwd),
            "line": c.switch.line,
            "add": list(c.switch.add),
            "args": list(c.switch.args),
            "how": c.switch.how,
        },
    }


def to_dict(result: FixResult) -> dict[str, Any]:
    """The JSON document of ``fix --json``."""
    cwd = result.plan.cwd
    p = result.proof
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "script": relative(result.script, cwd) if result.script else None,
        "run_folder": result.run_folder,
        "options": result.options,
        "changes": [change_dict(c, cwd) for c in result.plan.changes],
        "patch": result.patch,
        "together": None
        if p is None or p.together is None
        else {
            "changes": list(p.together_ids),
            "measured": _measured(p.together),
            "fidelity": _fidelity(p.together_fidelity),
        },
        "written": [
            {"file": relative(f, cwd), "backup": relative(b, cwd)} for f, b in result.written
        ],
        "notes": result.notes,
        "script_failed": None
        if result.failure is None
        else {
            "status": result.failure.status,
            "code": result.failure.code,
            "exception": result.failure.exception or None,
            "steps": result.failure.steps,
        },
    }


def to_json(result: FixResult) -> str:
    return json.dumps(to_dict(result), indent=2, allow_nan=False)


def write_json(result: FixResult, path: str) -> None:
    from torchdoctor.inputs import write_output

    write_output(path, to_json(result) + "\n", "JSON document")
