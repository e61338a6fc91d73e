"""The CUDA caching allocator in a check run (``torchdoctor check``): fragmentation, reserved
memory far above allocated or allocations that had to free the cache and retry, and running out
of memory.

Read from the run's ``gpu.memory`` (the allocator's statistics at the peak) and ``oom`` (what
check recorded when an allocation failed, with the snapshot's analysis when it could read it).
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

GIB = 2**30

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
        title={"slack_gib": slack / 2**30, "frag": mem.get("fragmentation"), "retries": retries},
        evidence={"memory": mem},
        least="warning" if retries or tight else None,
        judged="memory/fragmentation.py" if judged else None,
    )


OOM_SPEC = FindingSpec(
    id="out-of-memory",
    label="out of memory",
    title="out of memory: {parts}",
    probe="unscaled",
    severity=SeverityPolicy(fixed="critical", risk=True),
    fix=static(fx.OOM),
    explanation="What filled the memory: {parts}. Who held it and how fragmented the cache "
    "was: `torchdoctor memory memory_snapshot.pickle` in the run folder "
    "(docs/memory.md).{snapshot}",
    doc_url=f"{fx.DOCS}/torch_cuda_memory.html",
)


def measure_oom(run: RunRecord) -> Measured | None:
    """An allocation failed (``value``: the bytes it asked for; any fires): what filled the
    memory, model state (weights and gradients, Adam's two moments) against activations and
    temporaries and the cache's unused part; the saving is the whole step (the run stopped)."""
    oom = run.oom
    if not oom:
        return None
    opts = run.config.optimizers
    params = sum(o.param_bytes for o in opts)
    adam = any("Adam" in o.class_name for o in opts)
    model_state = params * (4 if adam else 2)  # weights + grads (+ 2 Adam moments)
    held = oom.get("allocated_bytes") or (oom.get("memory") or {}).get("peak_allocated_bytes", 0)
    parts = [f"tried to allocate {oom.get('tried_bytes', 0) / GIB:.2f} GiB"]
    if params:
        parts.append(f"weights+grads{'+Adam state' if adam else ''} ~{model_state / GIB:.2f} GiB")
    if held:
        parts.append(f"activations and temporaries ~{max(0, held - model_state) / GIB:.2f} GiB")
    if oom.get("reserved_unallocated_bytes"):
        parts.append(f"{oom['reserved_unallocated_bytes'] / GIB:.2f} GiB reserved but unused")
    text = "; ".join(parts)
    # the snapshot's analysis (torchdoctor memory), when check could read it: holders by code
    snapshot = oom.get("memory_analysis") or {}
    where = [h["where"] for h in snapshot.get("top_holders", [])] or [
        b["where"] for b in oom.get("largest_blocks", []) if b.get("where")
    ]
    return Measured(
        value=float(oom.get("tried_bytes") or 0),
        saving_ms=run.step_ms or 0.0,
        title={"parts": text},
        evidence={"oom": oom, "model_state_bytes": model_state},
        where=tuple(where),
        explain={
            "parts": text,
            "snapshot": f" Snapshot: {snapshot['text']}." if snapshot.get("text") else "",
        },
    )


RULES = (RunRule(FRAGMENTATION_SPEC, measure_fragmentation), RunRule(OOM_SPEC, measure_oom))
