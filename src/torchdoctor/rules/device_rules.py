"""Trace rules about the device itself: math precision on the tensor cores, and memory."""

from __future__ import annotations

from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.memory.fragmentation import fragmented
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.registry import spec
from torchdoctor.rules.trace_common import finding, grade


def fp32_gemms(a: TraceAnalysis) -> Finding | None:
    """fp32 GEMM/convolution kernels on the SIMT cores of a GPU that has tensor cores."""
    k = a.kernels
    if k is None or not k.gpu.has_tensor_cores or k.gpu_time_ms <= 0 or k.matmul_ms <= 0:
        return None
    fp32_share = k.fp32_off_tensor_core_ms / k.matmul_ms
    matmul_share = k.matmul_ms / k.gpu_time_ms
    if fp32_share < th.FP32_GEMM_SHARE or matmul_share < th.MATMUL_MIN_SHARE:
        return None
    fp32_ms = a.per_step_ms(k.fp32_off_tensor_core_ms)
    saving = fp32_ms * (1 - 1 / th.TENSOR_CORE_SPEEDUP)
    cc = k.gpu.compute_capability
    bf16 = cc is not None and cc >= (8, 0)
    s = spec("fp32-gemm-no-tensor-cores")
    fix = s.fix(bf16)  # Volta/Turing (no bf16, no TF32): fp16 with loss scaling
    evidence = {
        "gpu": k.gpu.name,
        "compute_capability": list(cc) if cc else None,
        "matmul_share_of_gpu_time": round(matmul_share, 4),
        "fp32_simt_share_of_matmul": round(fp32_share, 4),
        "fp32_simt_matmul_ms_per_step": round(fp32_ms, 3),
        "matmul_ms_per_step_by_dtype": {
            d: round(a.per_step_ms(v), 3) for d, v in k.matmul_ms_by_dtype.items() if v
        },
    }
    precision = "bf16 autocast or TF32" if bf16 else "fp16 autocast with GradScaler"
    return finding(
        a,
        "fp32-gemm-no-tensor-cores",
        s.format_title(fp32_share=fp32_share, gpu=k.gpu.name, precision=precision),
        saving,
        grade(s.id, saving / a.mean_step_ms if a.mean_step_ms else 0),
        evidence,
        fix=fix,
    )


def memory_pressure(a: TraceAnalysis) -> Finding | None:
    """Peak reserved memory near the device's capacity, or a fragmented caching allocator."""
    m = a.memory
    if m is None or not getattr(m, "devices", None):
        return None
    gib = 2**30
    for d in m.devices:
        total, reserved = d.total_memory_bytes or 0, d.peak_reserved_bytes or 0
        free_pool = d.reserved_minus_allocated_at_peak_bytes or 0
        near_full = total > 0 and reserved / total >= th.MEMORY_PRESSURE
        if not (near_full or fragmented(reserved, free_pool)):
            continue
        evidence = {
            "device": d.device_id,
            "peak_allocated_gib": round(d.peak_allocated_bytes / gib, 2),
            "peak_reserved_gib": round(reserved / gib, 2),
            "device_total_gib": round(total / gib, 2) if total else None,
            "reserved_unallocated_at_peak_gib": round(free_pool / gib, 2),
        }
        what = (
            f"peak reserved {reserved / gib:.1f} of {total / gib:.1f} GiB"
            if near_full
            else f"{free_pool / gib:.1f} GiB reserved but unallocated at the peak"
        )
        return finding(
            a,
            "memory-pressure",
            spec("memory-pressure").format_title(device=d.device_id, what=what),
            0.0,
            grade("memory-pressure", 0.0),
            evidence,
        )
    return None
