"""Device-to-device copies on the critical path: the device copies one buffer of its own memory
to another while no kernel runs beside it (``.contiguous()``, ``.clone()``, ``torch.cat``, a
dtype or layout change before a kernel that needs it).

A worked example of a finding family (docs/architecture.md): the registry entry and the function
that measures it sit side by side, and nothing outside this module and its test knows about it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from torchdoctor.analysis._join import in_window, launch_of
from torchdoctor.analysis.waits import innermost
from torchdoctor.rules.spec import (
    Details,
    FindingSpec,
    Measured,
    SeverityPolicy,
    TraceRule,
)
from torchdoctor.threshold import Threshold
from torchdoctor.trace.kinds import Kind

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis

D2D_WARN = Threshold(
    0.05,
    "device-to-device copies with nothing else running hold the device for 5% of the step: "
    "the share at which every other device-time finding becomes a warning",
)
D2D_CRITICAL = Threshold(0.25, "a quarter of the step spent copying within the device")
COPY_OPS = ("aten::copy_", "aten::_to_copy", "aten::empty")
"""Operators that only carry out a copy another operator asked for."""
OPS_EXAMINED = 64
"""The longest copies whose launching operator is looked up (the evidence, not the decision)."""


def device_copies_fix(graphs: int = 0) -> str:
    """Views and in-place writes always; ``torch.compile`` only for a step that is not already
    replaying CUDA/HIP graphs (``graphs``: the trace's graph launches), which is compiled."""
    lines = [
        "# the evidence names the operators that copy: keep a view where one will do",
        "# (x.view / x.transpose / x[idx] instead of x.contiguous() / x.clone()),",
        "# preallocate and write in place instead of torch.cat in a loop",
    ]
    if graphs:
        lines.append(
            f"# (the step already replays graphs, {graphs} launches: the copies are in the"
        )
        lines.append("# captured code itself, so the change goes in the model's code)")
        return "\n".join(lines)
    lines[-1] += ", or let the"
    lines += [
        "# compiler fold layout copies into the kernels that read them:",
        "model = torch.compile(model)",
    ]
    return "\n".join(lines)


SPEC = FindingSpec(
    id="device-copies",
    label="device-to-device copies",
    title="Device-to-device copies: {ms:.1f} ms per step ({share:.0%}) with no kernel beside "
    "them, {count:.0f} copies per step, most from {op}",
    probe="kernel",
    severity=SeverityPolicy(D2D_WARN, D2D_CRITICAL),
    threshold=D2D_WARN,
    fix=device_copies_fix,
    explanation="A copy from one device buffer to another moves bytes without computing; with no "
    "kernel running beside it the whole device waits for it. Such copies come from layout changes "
    "(.contiguous() after a transpose, .reshape() of a non-contiguous tensor), .clone(), "
    "torch.cat and dtype casts. Views, in-place writes and torch.compile remove most of them.",
    doc_url="https://pytorch.org/docs/stable/tensor_view.html",
    knobs=("compile",),
)


def measure(a: TraceAnalysis) -> Measured | None:
    """The steps' device time in D2D copies alone (the breakdown's exclusive ``memcpy_d2d``)."""
    if not a.has_gpu or a.mean_step_ms <= 0:
        return None
    ms = a.per_step_ms(a.total.busy_ms.get("memcpy_d2d", 0.0))
    if ms <= 0:
        return None
    share = ms / a.mean_step_ms
    t, act = a.table, a.activity
    rows = in_window(t, a.steps, act.rows[act.memcpy_dir == "DtoD"])
    nbytes = float(np.clip(t.nbytes[rows], 0, None).sum())
    dur_s = float(t.dur[rows].sum()) / 1e6

    def details() -> Details:
        ops = launching_ops(a, rows)
        top = max(ops, key=ops.__getitem__) if ops else "operators the trace does not name"
        return Details(
            title={"op": top},
            evidence={
                "longest_copies_examined": min(len(rows), OPS_EXAMINED),
                "their_launching_ops_ms_per_step": {k: round(v, 3) for k, v in ops.items()},
            },
            where=tuple(sorted(ops, key=ops.__getitem__, reverse=True)[:5]),
        )

    return Measured(
        value=share,
        saving_ms=ms,
        title={"ms": ms, "share": share, "count": len(rows) / a.n_steps},
        evidence={
            "d2d_alone_ms_per_step": round(ms, 3),
            "share_of_step": round(share, 4),
            "copies_per_step": round(len(rows) / a.n_steps, 1),
            "bytes_per_step": int(nbytes / a.n_steps),
            "achieved_gb_per_s": round(nbytes / dur_s / 1e9, 1) if dur_s > 0 else None,
        },
        fix={"graphs": a.launch.graph_launch_count or 0},
        details=details,
    )


def launching_ops(a: TraceAnalysis, rows: np.ndarray) -> dict[str, float]:
    """The torch operator that launched each of the longest copies, with their device time
    (ms per step), the largest first."""
    t = a.table
    longest = rows[np.argsort(-t.dur[rows], kind="stable")[:OPS_EXAMINED]]
    launches = launch_of(t, longest)
    out: dict[str, float] = {}
    for row, launch in zip(longest, launches, strict=True):
        if launch < 0:
            continue
        at = float(t.ts[launch])
        # the operator that asked for the copy (aten::contiguous, aten::cat, aten::to), not the
        # aten::copy_ inside it; a bare copy_ when that is all there is
        op = innermost(t, at, Kind.CPU_OP, skip=COPY_OPS)
        op = op if op >= 0 else innermost(t, at, Kind.CPU_OP)
        name = t.names[int(t.name[op])] if op >= 0 else "no operator"
        out[name] = out.get(name, 0.0) + float(t.dur[row]) / 1e3 / a.n_steps
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


RULES = (TraceRule(SPEC, measure),)
