"""The CUDA caching allocator in a check run (``torchdoctor check``): fragmentation, reserved
memory far above allocated or allocations that had to free the cache and retry.

Read from the run's ``gpu.memory`` (the allocator's statistics at the peak). The out-of-memory
finding stays in ``rules/run_rules.py`` for now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchdoctor.memory.fragmentation import fragmented
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families.device import MEMORY_COMMAND
from torchdoctor.rules.spec import FindingSpec, Measured, RunRule, SeverityPolicy, static
from torchdoctor.threshold import Threshold

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord

ALLOC_RETRIES = Threshold(
    1.0,
    "one allocator retry is enough: the allocator freed its whole cache and synchronised the "
    "device to satisfy an allocation (fragmentation without retries is judged by "
    "memory/fragmentation.py)",
)

FRAGMENTATION_SPEC = FindingSpec(
    id="memory-fragmentation",
    label="memory fragmentation",
    title="reserved memory {slack_gib:.1f} GiB above allocated at the peak ({frag:.0%}), "
    "{retries} allocator retries",
    sources=("run",),
    probe="unscaled",
    severity=SeverityPolicy(fixed="info", risk=True),
    threshold=ALLOC_RETRIES,
    fix=static(fx.FRAGMENTATION),
    explanation="The caching allocator holds blocks it cannot reuse for differently sized "
    "tensors; retries free the cache and synchronise. Expandable segments grow in place "
    "instead. " + MEMORY_COMMAND,
    doc_url=f"{fx.DOCS}/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf",
)


def measure_fragmentation(run: RunRecord) -> Measured | None:
    """The allocator's retries (``value``), or the reserved-but-unallocated memory at the peak
    judged fragmented; a warning with retries or a device nearly full (``MEMORY_PRESSURE``),
    info otherwise. Saving not measured (0)."""
    mem = run.gpu.memory if run.gpu is not None else {}
    if not mem.get("peak_reserved_bytes"):
        return None
    slack = mem["peak_reserved_bytes"] - mem["peak_allocated_bytes"]
    retries = mem.get("alloc_retries", 0)
    tight = mem["peak_reserved_bytes"] >= th.MEMORY_PRESSURE * mem.get("total_bytes", float("inf"))
    judged = fragmented(mem["peak_reserved_bytes"], slack)
    return Measured(
        value=float(retries),
        saving_ms=0.0,
        share=0.0,
        title={"slack_gib": slack / 2**30, "frag": mem.get("fragmentation"), "retries": retries},
        evidence={"memory": mem},
        least="warning" if retries or tight else None,
        judged="memory/fragmentation.py" if judged else None,
    )


RULES = (RunRule(FRAGMENTATION_SPEC, measure_fragmentation),)
