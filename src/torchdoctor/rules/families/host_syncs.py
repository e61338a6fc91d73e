"""Host syncs in a check run's step (``torchdoctor check``): lines of the user's loop that read a
device value on the host (``.item()``, ``.cpu()``, a comparison in an ``if``) every step or
every other step, and the syncs CUDA's sync-debug mode saw (``syncs.sync_debug``), also those
torch makes for the user (GradScaler's found_inf). The trace's counterpart is ``sync-stalls``
(``syncs.py``), which this finding replaces when both fire.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchdoctor.record.typed import plain
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, Measured, RunRule, static

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord

SPEC = FindingSpec(
    id="host-syncs-in-step",
    label="host syncs in the step",
    title="{calls:.1f} host syncs per step ({kinds}){note}",
    threshold=th.SYNC_PER_STEP,
    fix=static(fx.HOST_SYNCS),
    explanation="Reading a device value on the host waits for every queued kernel, so the CPU "
    "stops queueing work and the GPU idles at the start of the next step.",
    doc_url=f"{fx.DOCS}/generated/torch.cuda.set_sync_debug_mode.html",
    aliases=("sync-stalls",),
    codemods=("sync-every-n",),
    frameworks=(
        (
            "lightning",
            lambda f: (
                "# in training_step: log the tensor, not loss.item(); Lightning reduces it lazily\n"
                'self.log("train_loss", loss, on_step=True, sync_dist=False)\n'
                "Trainer(log_every_n_steps=50)"
            ),
        ),
        (
            "transformers",
            lambda f: (
                "TrainingArguments(..., logging_steps=50)  # each log reads the loss back from the GPU"
            ),
        ),
    ),
)


def measure(run: RunRecord) -> Measured | None:
    """The busiest sync site's calls per measured step (``value``; the sites at
    ``SYNC_PER_STEP`` or more are the loop's), or CUDA's sync-debug mode's judgement; saving
    (ms/step): the time blocked inside the loop's sites. Syncs on CPU tensors are free now
    (info)."""
    rows, debug = run.syncs.host_syncs, run.syncs.sync_debug
    measured = run.steps.measured_steps
    if not measured or not (rows or debug):
        return None
    per_step = [r for r in rows if r.calls / measured >= th.SYNC_PER_STEP]
    calls = sum(r.calls for r in per_step) / measured
    # CUDA's sync-debug mode counts over its own window (older records: the profiled one), and
    # also sees the syncs torch makes for the user (GradScaler's found_inf): per step it
    # watched, the larger count is the truth.
    debug_steps = run.syncs.sync_debug_steps or run.steps.window_steps or measured
    debug_calls = sum(d.count for d in debug) / debug_steps
    blocked_ms = sum(r.seconds for r in per_step) * 1e3 / measured
    on_device = any(r.device != "cpu" for r in per_step) or bool(debug)
    kinds = ", ".join(sorted({r.kind for r in per_step})) or "found by CUDA sync-debug mode"
    note = "" if on_device else " (CPU tensors here: free now, a full sync on a GPU)"
    return Measured(
        value=max((r.calls for r in rows), default=0) / measured,
        saving_ms=blocked_ms,
        title={"calls": max(calls, debug_calls), "kinds": kinds, "note": note},
        evidence={
            "syncs_per_step": max(calls, debug_calls),
            "sync_debug_per_step": debug_calls,
            "blocked_ms_per_step": blocked_ms,
            "sites": plain(per_step[:8]),
            "sync_debug_sites": plain(debug[:8]),
        },
        where=tuple([r.site for r in per_step[:8]] + [d.site for d in debug[:4]]),
        most=None if on_device else "info",
        judged="CUDA's sync-debug mode" if debug else None,
    )


RULES = (RunRule(SPEC, measure),)
