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
        where = [w for w in f.where if not is_ours(w)]
        if where != f.where:
            changes["where"] = where
        out.append(dataclasses.replace(f, **changes) if changes else f)
    return out
