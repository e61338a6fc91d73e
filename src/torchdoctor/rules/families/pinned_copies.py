"""non_blocking copies from unpinned memory (``torchdoctor check``): the copy watch saw
``tensor.to(device, non_blocking=True)`` from pageable memory, which runs synchronously."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchdoctor.record.typed import plain
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, Measured, RunRule, static

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord

SPEC = FindingSpec(
    id="unpinned-non-blocking",
    label="non_blocking copies from unpinned memory",
    title="{copies:.1f} non_blocking copies per step from unpinned memory ({mib:.1f} MiB): "
    "they run synchronously",
    fix=static(fx.UNPINNED),
    explanation="non_blocking=True only overlaps a host-to-device copy when the source is "
    "pinned; from pageable memory the copy is staged and blocks the host.",
    doc_url=f"{fx.DOCS}/notes/cuda.html#use-pinned-memory-buffers",
    knobs=("pin_memory",),
    codemods=("dataloader-args",),
)


def measure(run: RunRecord) -> Measured | None:
    """Any such copy fires; saving (ms/step): its bytes at ``PAGEABLE_GBPS``."""
    rows = run.syncs.unpinned_non_blocking
    if not rows:
        return None
    measured = max(1, run.steps.measured_steps)
    copies = sum(r.copies for r in rows) / measured
    nbytes = sum(r.bytes for r in rows) / measured
    saving = nbytes / (th.PAGEABLE_GBPS * 1e9) * 1e3
    return Measured(
        value=copies,
        saving_ms=saving,
        title={"copies": copies, "mib": nbytes / 2**20},
        evidence={"copies_per_step": copies, "bytes_per_step": nbytes, "sites": plain(rows[:8])},
        where=tuple(r.site for r in rows[:8]),
    )


RULES = (RunRule(SPEC, measure),)
