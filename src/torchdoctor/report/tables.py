"""Kernel and operator tables for the terminal report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis

_NAME_WIDTH = 70


def _short(name: str) -> str:
    return name if len(name) <= _NAME_WIDTH else name[: _NAME_WIDTH - 1] + "…"


def kernel_table(a: TraceAnalysis, top: int) -> Table | None:
    """Top kernels by total time, with category, tensor-core use and dtype."""
    k = a.kernels
    if k is None or not k.top_kernels:
        return None
    t = Table(
        title=f"Top kernels (of {k.kernel_count} in {a.n_steps} steps)",
        title_justify="left",
        show_edge=False,
    )
    for col, just in (
        ("kernel", "left"),
        ("category", "left"),
        ("count", "right"),
        ("total ms", "right"),
        ("mean µs", "right"),
        ("share", "right"),
        ("TC", "left"),
        ("dtype", "left"),
    ):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in k.top_kernels[:top]:
        tc = "" if r.tensor_core is None else ("yes" if r.tensor_core else "no")
        t.add_row(
            _short(r.name),
            r.category,
            str(r.count),
            f"{r.total_ms:.2f}",
            f"{r.mean_us:.1f}",
            f"{r.share_of_gpu_time:.1%}",
            tc,
            r.dtype,
        )
    if k.tensor_core_share is not None:
        t.caption = (
            f"GEMM/conv {k.matmul_ms:.1f} ms, on tensor cores "
            f"{k.tensor_core_share:.0%}; by dtype: "
            + ", ".join(f"{d} {v:.1f} ms" for d, v in k.matmul_ms_by_dtype.items() if v)
        )
        t.caption_justify = "left"
    return t


def operator_table(a: TraceAnalysis, top: int) -> Table | None:
    """key_averages-style: top operators by self device time (or self CPU time without a GPU)."""
    ops = a.operators
    rows: Any = getattr(ops, "top_by_self_device", None) if a.has_gpu else None
    key = "self device"
    if not rows:
        rows, key = getattr(ops, "top_by_self_cpu", None), "self CPU"
    if not rows:
        return None
    t = Table(title=f"Top operators by {key} time", title_justify="left", show_edge=False)
    for col, just in (
        ("operator", "left"),
        ("calls", "right"),
        ("self CPU ms", "right"),
        ("CPU total ms", "right"),
        ("self device ms", "right"),
        ("device total ms", "right"),
    ):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in rows[:top]:
        t.add_row(
            _short(r.name),
            str(r.calls),
            f"{r.self_cpu_ms:.2f}",
            f"{r.cpu_total_ms:.2f}",
            f"{r.self_device_ms:.2f}",
            f"{r.device_total_ms:.2f}",
        )
    return t
