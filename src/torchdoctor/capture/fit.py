"""Make the trace analyser's findings fit the run ``check`` watched: a fix that says
``torch.compile(model)`` for a model the script already compiles becomes the next step that
applies, and no finding points into torchdoctor's own code."""

from __future__ import annotations

import dataclasses
from typing import Any

from torchdoctor.capture.own_frames import is_ours
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.run_inputs import RunRecord
from torchdoctor.rules.user_fixes import compiled_next_step

_COMPILE_ADVICE = "torch.compile(model"


def _next_step(run: RunRecord) -> str:
    c = run.compile
    optim = [o for o in run.config.optimizers if o.get("impl") == "for-loop"]
    sites = len({b.get("site") for b in c.graph_breaks})
    return compiled_next_step(c.compile_calls, sites, run.gpu is not None, optim)


def fit_to_run(findings: list[Finding], record: dict[str, Any]) -> list[Finding]:
    """``findings`` with fixes adapted to what the run already does and our frames removed."""
    run = RunRecord.from_dict(record)
    out = []
    for f in findings:
        changes: dict[str, Any] = {}
        if run.compile.compiled and _COMPILE_ADVICE in f.fix:
            changes["fix"] = _next_step(run)
        fix = _fit_fix(f, run, record)
        if fix is not None and fix != f.fix:
            changes["fix"] = fix
        where = [w for w in f.where if not is_ours(w)]
        if where != f.where:
            changes["where"] = where
        out.append(dataclasses.replace(f, **changes) if changes else f)
    return out


def micro_batches_per_step(record: dict[str, Any]) -> float:
    """backward() calls per optimizer step in the measured steps (1 without accumulation)."""
    cfg = record.get("config") or {}
    steps = int(cfg.get("measured_optimizer_steps") or 0)
    return int(cfg.get("measured_backward_calls") or 0) / steps if steps else 1.0


def _fit_fix(f: Finding, run: RunRecord, record: dict[str, Any]) -> str | None:
    """The trace analyser's fixed texts made to fit the run: DDP under gradient accumulation
    gets no_sync (its all-reduce runs once per micro-batch), and a CPU run's input fixes lose
    pin_memory and get workers for the CPUs this rank has."""
    from torchdoctor.rules import fixes as fx

    if f.id == "exposed-communication" and (record.get("config") or {}).get("ddp"):
        k = micro_batches_per_step(record)
        if k >= 1.5:
            if "skew_wait_ms_per_step" in f.evidence:  # fewer collectives: fewer waits too
                return fx.no_sync_fix(k) + "\n# and the late rank's extra work:\n" + f.fix
            return fx.no_sync_fix(k)
    if f.id in ("input-pipeline", "data-loading-bound") and run.gpu is None:
        cpus = max(1, min(8, int(next((d.cpus for d in run.config.dataloaders), 0) or _cores())))
        text = f.fix.replace(", pin_memory=True", "").replace("pin_memory=True, ", "")
        text = text.replace("num_workers=min(8, os.cpu_count())", f"num_workers={cpus}")
        return text.replace("num_workers=4", f"num_workers={cpus}")
    return None


def _cores() -> int:
    from torchdoctor.capture.cpu_usage import usable_cores

    return usable_cores()
