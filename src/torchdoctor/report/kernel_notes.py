"""Notes under the kernel table: the dense peaks per precision mode, dtypes not claimable from a
name, and kernel names nobody recognised (counted, never called "no tensor cores")."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchdoctor.analysis.kernels import KernelStats

_PEAK_LABEL = {"fp32": "fp32 on CUDA cores", "tf32": "tf32"}


def kernel_notes(k: KernelStats) -> list[str]:
    """One line each: datasheet peaks of the GEMM dtypes seen, unclaimable dtypes, unknown names."""
    notes = []
    if k.peak_tflops_by_dtype:
        notes.append(
            "dense peaks (datasheet): "
            + ", ".join(
                f"{_PEAK_LABEL.get(d, d)} {v:.1f}" for d, v in k.peak_tflops_by_dtype.items()
            )
            + " TFLOP/s"
        )
    unclaimed = [
        r.name
        for r in k.top_kernels
        if r.dtype == "unknown" and not r.dtype_in_name and r.category == "attention"
    ]
    if unclaimed:
        notes.append(
            f"{len(unclaimed)} attention kernel(s) on tensor cores whose names carry no input dtype: "
            "dtype not claimed"
        )
    if k.unclassified_names:
        share = k.unclassified_ms / k.gpu_time_ms if k.gpu_time_ms > 0 else 0.0
        notes.append(
            f"unrecognised kernel names: {k.unclassified_names} ({k.unclassified_ms:.1f} ms, "
            f"{share:.1%} of GPU time): tensor-core use unknown, not counted as off"
        )
    return notes
