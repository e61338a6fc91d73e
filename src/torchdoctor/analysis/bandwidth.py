"""Bytes moved by GEMM and attention kernels, from the shapes the trace recorded, against the
device's memory bandwidth: how close a decode step runs to what the memory can deliver.

For each GEMM/attention operator that launches kernels (``trace.columns.SHAPE_OPS``: ``aten::mm``,
``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm``, the flash / efficient / cuDNN attention
forwards) whose ``Input Dims`` and ``Input type`` were recorded (``record_shapes=True``):

* bytes = every input tensor read once plus the output written once (elements times the dtype's
  size); an ideal kernel moves no less, so the achieved rate is a lower bound;
* FLOPs = 2·M·K·N for a GEMM (times the batch for ``bmm``), 4·B·H·L·S·E for attention (no
  causal discount: an upper bound);
* device time = the kernels launched under the operator's External id.

Achieved bandwidth is bytes over that device time; its share of the peak (``hardware.py``'s
``HBM_BANDWIDTH``) says how memory-bound the step runs. Arithmetic intensity (FLOPs per byte)
below the ridge point (peak FLOP/s over peak bandwidth) means the kernels are limited by
memory, as decode GEMMs with a few rows are. Kernels run from a CUDA graph have no operator at
replay, so they are not covered; the result says how much device time it covers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from torchdoctor.analysis._join import gpu_rows, time_by_recorded_op
from torchdoctor.hardware import memory_bandwidth, peak_flops
from torchdoctor.trace.columns import ELEMENT_BYTES, SHAPE_OPS, decode_shapes
from torchdoctor.trace.table import TraceTable

_PEAK_DTYPE = {4: "fp32", 2: "bf16", 1: "fp8"}


@dataclass(frozen=True)
class Bandwidth:
    """GEMM/attention traffic in a set of time windows (bytes per window summed)."""

    ops: int
    """Operators whose shapes and kernels were both recorded."""
    bytes_moved: float
    flops: float
    kernel_ms: float
    """Device time of those operators' kernels."""
    covered_share: float
    """kernel_ms over all kernel time in the windows."""
    achieved_gb_per_s: float | None
    achieved_tflops: float | None
    """FLOPs over the kernels' device time, in TFLOP/s (for prefill, where compute limits)."""
    peak_gb_per_s: float | None
    share_of_peak: float | None
    arithmetic_intensity: float | None
    """FLOPs per byte."""
    peak_tflops: float | None
    """Dense peak of the dominant dtype (``hardware.py``), TFLOP/s."""
    ridge_point: float | None
    """Peak FLOP/s over peak bytes/s for the dominant dtype: below it, memory-bound."""
    peak_source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def op_traffic(dims: list[Any], types: list[Any], name: str) -> tuple[float, float] | None:
    """(bytes, FLOPs) of one operator call from its recorded dims and types, or None."""
    tensors = [(d, t) for d, t in zip(dims, types, strict=False) if isinstance(d, list) and d]
    sizes = [ELEMENT_BYTES.get(t) for _, t in tensors]
    if not tensors or any(s is None for s in sizes):
        return None
    numel = [int(np.prod(d)) for d, _ in tensors]
    elt = sizes[-1] or 2
    shapes = [d for d, _ in tensors]
    if "attention" in name:
        q, k = shapes[0], shapes[1]
        if len(q) != 4 or len(k) != 4:
            return None
        # (B, L, H, E) for the inner forwards, (B, H, L, E) for the sdpa entry points
        inner = name.endswith(("_flash_attention_forward", "_efficient_attention_forward"))
        seq = k[1] if inner else k[2]
        out = numel[0] // q[-1] * shapes[2][-1] if len(shapes) > 2 else numel[0]
        read = sum(c * (s or 0) for c, s in zip(numel[:3], sizes[:3], strict=False))
        return float(read + out * (sizes[0] or 2)), 4.0 * numel[0] * seq
    a, b = (shapes[0], shapes[1]) if name == "aten::_scaled_mm" else (shapes[-2], shapes[-1])
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    m, kdim, n = a[-2], a[-1], b[-1]
    batch = int(np.prod(a[:-2])) if len(a) > 2 else 1
    read = sum(c * (s or 0) for c, s in zip(numel, sizes, strict=False))
    return float(read + batch * m * n * elt), 2.0 * batch * m * kdim * n


def bandwidth_in(
    table: TraceTable, windows: list[tuple[float, float]], device: str | None, mem: int | None
) -> Bandwidth | None:
    """Traffic of the shape-recorded operators whose kernels start inside ``windows``; None when
    no such operator has kernels there."""
    if not table.shapes or not windows:
        return None
    kernels = gpu_rows(table)
    ts = table.ts[kernels]
    inside = np.zeros(len(kernels), dtype=bool)
    for lo, hi in windows:
        inside |= (ts >= lo) & (ts < hi)
    kernels = kernels[inside]
    if not len(kernels):
        return None
    total_ms = float(table.dur[kernels].sum()) / 1e3
    by_op = time_by_recorded_op(table, kernels, SHAPE_OPS)  # not the elementwise ones
    nbytes = flops = us = 0.0
    elt_time: dict[int, float] = {}
    ops = 0
    for x, d in by_op.items():
        name, raw_dims, raw_types = table.shapes[x]
        shapes = decode_shapes(raw_dims, raw_types)
        got = None if shapes is None else op_traffic(*shapes, name)
        if shapes is None or got is None:
            continue
        ops += 1
        nbytes, flops, us = nbytes + got[0], flops + got[1], us + d
        size = ELEMENT_BYTES.get(str(shapes[1][0]), 2) if raw_types else 2
        elt_time[size] = elt_time.get(size, 0.0) + d
    if not ops or us <= 0:
        return None
    return _result(ops, nbytes, flops, us, total_ms, elt_time, device, mem)


def _result(
    ops: int,
    nbytes: float,
    flops: float,
    us: float,
    total_ms: float,
    elt_time: dict[int, float],
    device: str | None,
    mem: int | None,
) -> Bandwidth:
    achieved = nbytes / (us / 1e6)
    peak = memory_bandwidth(device, mem) if device else None
    dtype = _PEAK_DTYPE.get(max(elt_time, key=elt_time.__getitem__), "bf16")
    flop_peak = peak_flops(device, dtype) if device else None
    ridge = flop_peak / peak[0] if peak and flop_peak else None
    return Bandwidth(
        ops=ops,
        bytes_moved=nbytes,
        flops=flops,
        kernel_ms=us / 1e3,
        covered_share=(us / 1e3) / total_ms if total_ms > 0 else 0.0,
        achieved_gb_per_s=achieved / 1e9,
        achieved_tflops=flops / (us / 1e6) / 1e12,
        peak_gb_per_s=peak[0] / 1e9 if peak else None,
        share_of_peak=achieved / peak[0] if peak else None,
        arithmetic_intensity=flops / nbytes if nbytes > 0 else None,
        peak_tflops=flop_peak / 1e12 if flop_peak else None,
        ridge_point=ridge,
        peak_source=peak[1] if peak else "",
    )
