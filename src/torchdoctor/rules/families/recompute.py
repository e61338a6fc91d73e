"""Activation checkpointing (``torchdoctor check``): backward runs each checkpointed forward
again; the checkpoint watch timed those forwards during the measured steps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, Measured, RunRule, SeverityPolicy, static

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord

SPEC = FindingSpec(
    id="activation-recompute",
    label="activation checkpointing recomputation",
    title="activation checkpointing recomputes {ms:.1f} ms of forward per step ({share:.0%}"
    " of the step), {calls:.0f} checkpointed calls per step",
    probe="kernel",
    severity=SeverityPolicy(warn=th.RECOMPUTE_WARN),
    fix=static(fx.ACTIVATION_RECOMPUTE),
    explanation="Backward runs each checkpointed forward again to rebuild the activations "
    "it did not keep: memory bought with compute. The cost is the checkpointed forward's "
    "time (measured on the host: exact on a CPU, a lower bound on a GPU).",
    doc_url=f"{fx.DOCS}/checkpoint.html",
)


def measure(run: RunRecord) -> Measured | None:
    """Any checkpointed forward in the measured steps (severity from ``RECOMPUTE_WARN``);
    saving (ms/step): that forward's time, recomputed in backward."""
    ck, measured, step = run.config.checkpointing, run.steps.measured_steps, run.step_ms
    calls = ck.calls_measured
    if not calls or not measured or not step:
        return None
    ms = ck.forward_s_measured * 1e3 / measured
    return Measured(
        value=calls / measured,
        saving_ms=ms,
        title={"ms": ms, "share": ms / step, "calls": calls / measured},
        evidence={
            "recompute_ms_per_step": ms,
            "checkpointed_calls_per_step": calls / measured,
            "gemm_share": run.op_summary.gemm_share,
            "checkpointing": ck.to_dict(),
        },
    )


RULES = (RunRule(SPEC, measure),)
