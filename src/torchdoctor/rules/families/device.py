"""The device itself: matrix math in fp32 off the tensor cores, and memory near the device's
capacity (or a fragmented caching allocator, as ``memory/fragmentation.py`` judges it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchdoctor.memory.fragmentation import fragmented
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import (
    FindingSpec,
    Gate,
    Measured,
    SeverityPolicy,
    TraceRule,
    static,
)

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis

D = fx.DOCS
GIB = 2**30

FP32_SPEC = FindingSpec(
    id="fp32-gemm-no-tensor-cores",
    label="fp32 GEMMs off the tensor cores",
    title="fp32 GEMMs off the tensor cores: {fp32_share:.0%} of matmul time on a {gpu} (use "
    "{precision})",
    probe="kernel",
    severity=SeverityPolicy(th.FP32_GEMM_WARN, th.FP32_GEMM_CRITICAL),
    threshold=th.FP32_GEMM_SHARE,
    gates=(Gate("matmul_share", th.MATMUL_MIN_SHARE),),
    fix=fx.fp32_gemm_fix,
    explanation="fp32 matrix multiplies run on the SIMT cores; in bf16/fp16 (or TF32) they run "
    "on the tensor cores at several times the throughput.",
    doc_url=f"{D}/amp.html",
    knobs=("precision",),
    codemods=("bf16-autocast", "tf32-matmul"),
    frameworks=(
        ("lightning", lambda f: 'Trainer(precision="bf16-mixed")'),
        ("transformers", lambda f: "TrainingArguments(..., bf16=True, tf32=True)"),
    ),
)


def fp32_gemms(a: TraceAnalysis) -> Measured | None:
    """fp32 GEMM/convolution kernels on the SIMT cores of a GPU that has tensor cores: the
    value is their share of matmul time, the gate matmul's share of device time; the saving a
    conservative ``TENSOR_CORE_SPEEDUP`` on that time."""
    k = a.kernels
    if k is None or not k.gpu.has_tensor_cores or k.gpu_time_ms <= 0 or k.matmul_ms <= 0:
        return None
    fp32_share = k.fp32_off_tensor_core_ms / k.matmul_ms
    matmul_share = k.matmul_ms / k.gpu_time_ms
    fp32_ms = a.per_step_ms(k.fp32_off_tensor_core_ms)
    saving = fp32_ms * (1 - 1 / th.TENSOR_CORE_SPEEDUP)
    cc = k.gpu.compute_capability
    bf16 = cc is not None and cc >= (8, 0)  # Volta/Turing (no bf16, no TF32): fp16 + scaling
    return Measured(
        value=fp32_share,
        saving_ms=saving,
        title={
            "fp32_share": fp32_share,
            "gpu": k.gpu.name,
            "precision": "bf16 autocast or TF32" if bf16 else "fp16 autocast with GradScaler",
        },
        evidence={
            "gpu": k.gpu.name,
            "compute_capability": list(cc) if cc else None,
            "matmul_share_of_gpu_time": round(matmul_share, 4),
            "fp32_simt_share_of_matmul": round(fp32_share, 4),
            "fp32_simt_matmul_ms_per_step": round(fp32_ms, 3),
            "matmul_ms_per_step_by_dtype": {
                d: round(a.per_step_ms(v), 3) for d, v in k.matmul_ms_by_dtype.items() if v
            },
        },
        fix={"bf16": bf16},
        gates={"matmul_share": matmul_share},
    )


MEMORY_COMMAND = (
    "To see which code holds the memory at the peak and how fragmented the cache is, record a "
    "snapshot (`torchdoctor check --memory`, or `Runtime(memory_history=True)`) and run "
    "`torchdoctor memory SNAPSHOT.pickle` (docs/memory.md)."
)
"""Memory findings point at the command that explains a snapshot."""

MEMORY_SPEC = FindingSpec(
    id="memory-pressure",
    label="memory pressure",
    title="Memory pressure on GPU {device}: {what}",
    probe="unscaled",
    severity=SeverityPolicy(fixed="warning", risk=True),
    threshold=th.MEMORY_PRESSURE,
    fix=static(fx.MEMORY_PRESSURE),
    explanation="Peak memory is close to the device's capacity: one larger batch or a "
    "fragmented pool fails with out-of-memory. " + MEMORY_COMMAND,
    doc_url=f"{D}/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf",
)


def memory_pressure(a: TraceAnalysis) -> Measured | None:
    """The first device whose peak reserved memory reaches the spec's share of its capacity,
    or whose allocator ``memory/fragmentation.py`` judges fragmented. A risk, not a time: no
    saving."""
    m = a.memory
    if m is None or not getattr(m, "devices", None):
        return None
    limit = MEMORY_SPEC.threshold
    for d in m.devices:
        total, reserved = d.total_memory_bytes or 0, d.peak_reserved_bytes or 0
        free_pool = d.reserved_minus_allocated_at_peak_bytes or 0
        used = reserved / total if total > 0 else 0.0
        near_full = limit is not None and used >= limit
        frag = fragmented(reserved, free_pool)
        if not (near_full or frag):
            continue
        what = (
            f"peak reserved {reserved / GIB:.1f} of {total / GIB:.1f} GiB"
            if near_full
            else f"{free_pool / GIB:.1f} GiB reserved but unallocated at the peak"
        )
        return Measured(
            value=used,
            title={"device": d.device_id, "what": what},
            evidence={
                "device": d.device_id,
                "peak_allocated_gib": round(d.peak_allocated_bytes / GIB, 2),
                "peak_reserved_gib": round(reserved / GIB, 2),
                "device_total_gib": round(total / GIB, 2) if total else None,
                "reserved_unallocated_at_peak_gib": round(free_pool / GIB, 2),
            },
            judged=None if near_full else "fragmented (memory/fragmentation.py)",
        )
    return None


RULES = (TraceRule(FP32_SPEC, fp32_gemms), TraceRule(MEMORY_SPEC, memory_pressure))
