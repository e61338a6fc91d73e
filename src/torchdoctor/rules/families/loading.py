"""Getting the batch onto the device: the loop waiting for the DataLoader's next batch, and
host-to-device copies from pageable (unpinned) memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families._common import LOADER_FRAMEWORKS
from torchdoctor.rules.spec import FindingSpec, Measured, SeverityPolicy, TraceRule, static

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis

DATA_SPEC = FindingSpec(
    id="data-loading-bound",
    label="data loading",
    title="Data loading: {when} for the next batch",
    probe="data",
    severity=SeverityPolicy(th.DATA_WARN, th.DATA_CRITICAL),
    threshold=th.DATA_WARN,
    fix=fx.data_loader_fix,
    explanation="Batches are produced in the training process, so the device waits for every "
    "one; worker processes prepare them ahead while the GPU computes.",
    doc_url=f"{fx.DOCS}/data.html#multi-process-data-loading",
    knobs=("num_workers", "device_prefetch", "pin_memory"),
    codemods=("dataloader-args", "non-blocking-copies"),
    frameworks=LOADER_FRAMEWORKS,
)


def data_loading(a: TraceAnalysis) -> Measured | None:
    """The device (or the CPU loop) idle while the DataLoader produces the next batch."""
    if not a.mean_step_ms:
        return None
    ms = a.per_step_ms(a.total.idle_ms.get("data_loading", 0.0))
    share = ms / a.mean_step_ms
    what = "the GPU idles {} waiting" if a.has_gpu else "the loop waits {}"
    return Measured(
        value=share,
        saving_ms=ms,
        title={"when": what.format(f"{ms:.1f} ms per step ({share:.0%})")},
        evidence={"data_wait_ms_per_step": round(ms, 3), "share_of_step": round(share, 4)},
        fix={"gpu": a.has_gpu},
    )


PAGEABLE_SPEC = FindingSpec(
    id="pageable-h2d-copies",
    label="pageable host-to-device copies",
    title="Pageable host-to-device copies: {mb:.1f} MB per step at {gbps:.1f} GB/s (pin the "
    "memory)",
    severity=SeverityPolicy(th.PAGEABLE_WARN, th.PAGEABLE_CRITICAL),
    threshold=th.PAGEABLE_MIN_BYTES,
    fix=static(fx.PAGEABLE),
    explanation="Copies from pageable memory go through a staging buffer at lower bandwidth "
    "and block the CPU; pinned memory copies at full speed and overlaps with compute.",
    doc_url=f"{fx.DOCS}/notes/cuda.html#use-pinned-memory-buffers",
    knobs=("pin_memory",),
    codemods=("dataloader-args", "non-blocking-copies"),
)


def pageable_copies(a: TraceAnalysis) -> Measured | None:
    """Host-to-device copies from pageable memory: the bytes per step decide; the saving is
    the part of their time pinned memory would not take (``PINNED_SPEEDUP``)."""
    act, t = a.activity, a.table
    mask = act.pageable & (act.memcpy_dir == "HtoD")
    if not mask.any():
        return None
    rows = act.rows[mask]
    total_bytes = float(np.clip(t.nbytes[rows], 0, None).sum())
    nbytes = total_bytes / max(a.n_steps, 1)
    ms = a.per_step_ms(a.total.pageable_h2d_ms)
    dur_s = float(t.dur[rows].sum()) / 1e6
    gbps = total_bytes / dur_s / 1e9 if dur_s > 0 else 0.0
    return Measured(
        value=nbytes,
        saving_ms=ms * (1 - 1 / th.PINNED_SPEEDUP),
        share=ms / a.mean_step_ms if a.mean_step_ms else 0.0,
        title={"mb": nbytes / 2**20, "gbps": gbps},
        evidence={
            "pageable_h2d_copies_per_step": round(len(rows) / max(a.n_steps, 1), 2),
            "pageable_h2d_mb_per_step": round(nbytes / 2**20, 2),
            "pageable_h2d_ms_per_step": round(ms, 3),
            "achieved_gb_per_s": round(gbps, 2),
        },
    )


RULES = (TraceRule(DATA_SPEC, data_loading), TraceRule(PAGEABLE_SPEC, pageable_copies))
