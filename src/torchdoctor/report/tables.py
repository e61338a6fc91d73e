"""Kernel and operator tables for the terminal report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis

_NAME_WIDTH = 60


def _short(name: str, kernel: bool = True) -> str:
    """A readable name; for kernels, drop ``void``, namespaces and template arguments."""
    from rich.markup import escape

    n = name.removeprefix("void ") if kernel else name
    if not kernel:
        pass
    elif "<" in n:
        n = n[: n.index("<")] + "<…>"
    if kernel and "(" in n:
        n = n[: n.index("(")]
    if kernel and "::" in n:
        head = n.split("<", 1)[0]
        n = head.rsplit("::", 1)[-1] + n[len(head) :]
    n = n if len(n) <= _NAME_WIDTH else n[: _NAME_WIDTH - 1] + "…"
    return escape(n)


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
    t.add_column("kernel", no_wrap=True, overflow="ellipsis", max_width=_NAME_WIDTH)
    for col, just in (
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
            + ", ".join(f"{d} {v:.1f} ms" for d, v in k.matmul_ms_by_dtype.items() if v >= 0.05)
        )
        t.caption_justify = "left"
    return t


def operator_tables(a: TraceAnalysis, top: int) -> list[Table]:
    """key_averages-style tables: top operators by self device time (GPU traces) and self CPU."""
    ops = a.operators
    out = []
    if a.has_gpu and ops.top_by_self_device:
        out.append(_op_table(ops.top_by_self_device, "self device", top, device=True))
    if ops.top_by_self_cpu:
        out.append(_op_table(ops.top_by_self_cpu, "self CPU", top, device=a.has_gpu))
    return out


def _op_table(rows: Any, key: str, top: int, device: bool) -> Table:
    t = Table(title=f"Top operators by {key} time", title_justify="left", show_edge=False)
    t.add_column("operator", no_wrap=True, overflow="ellipsis", max_width=_NAME_WIDTH)
    cols = ["calls", "self CPU ms", "CPU total ms"]
    if device:
        cols += ["self device ms", "device total ms"]
    for col in cols:
        t.add_column(col, justify="right")
    for r in rows[:top]:
        cells = [str(r.calls), f"{r.self_cpu_ms:.2f}", f"{r.total_cpu_ms:.2f}"]
        if device:
            cells += [f"{r.self_device_ms:.2f}", f"{r.total_device_ms:.2f}"]
        t.add_row(_short(r.name, kernel=False), *cells)
    return t
