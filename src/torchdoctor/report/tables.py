"""Kernel and operator tables for the terminal report."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from torchdoctor.report.kernel_notes import kernel_notes
from torchdoctor.report.layout import Column, TableText, middle

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis

_NAME_WIDTH = 60
"""The longest a simplified kernel name gets before it is shortened from the middle."""
_ANONYMOUS = re.compile(r"\(anonymous namespace\)::")


def short_kernel(name: str) -> str:
    """A readable kernel name: no ``void``, namespaces, template or call arguments; the full
    name shortened from the middle when that leaves nothing to read."""
    n = _ANONYMOUS.sub("", name.removeprefix("void "))
    cut = [i for i in (n.find("<"), n.find("(")) if i > 0]
    if cut:
        i = min(cut)
        n = n[:i] + ("<…>" if n[i] == "<" else "")
    base = n.removesuffix("<…>")
    n = base.rsplit("::", 1)[-1] + n[len(base) :]
    if not n.removesuffix("<…>").strip(" :"):
        n = name.strip()
    return middle(n, _NAME_WIDTH)


def kernel_signature(name: str) -> str:
    """A kernel's name without ``void`` and its argument list, template arguments kept (they
    tell apart two instances of one kernel)."""
    n = name.removeprefix("void ").rstrip()
    if not n.endswith(")"):
        return n
    depth = 0
    for i in range(len(n) - 1, 0, -1):
        depth += {")": 1, "(": -1}.get(n[i], 0)
        if depth == 0:  # "Memcpy HtoD (Pageable -> Device)" is no call: a space before "("
            return n if n[i - 1] == " " else n[:i]
    return n


def kernel_table(a: TraceAnalysis, top: int) -> TableText | None:
    """Top kernels by total time, with category, tensor-core use and dtype."""
    k = a.kernels
    if k is None or not k.top_kernels:
        return None
    columns = (
        Column("kernel", right=False, flex="shorten"),
        Column("category", right=False),
        Column("count"),
        Column("total ms"),
        Column("mean µs"),
        Column("share"),
        Column("TC", right=False),
        Column("dtype", right=False),
    )
    rows = []
    for r in k.top_kernels[:top]:
        tc = "" if r.tensor_core is None else ("yes" if r.tensor_core else "no")
        if r.tensor_core is None and r.category in ("gemm", "convolution", "attention"):
            tc = "?"  # the name, the operator and the run leave it open: not "no"
        rows.append(
            (
                short_kernel(r.name),
                r.category,
                str(r.count),
                f"{r.total_ms:.2f}",
                f"{r.mean_us:.1f}",
                f"{r.share_of_gpu_time:.1%}",
                tc,
                r.dtype,
            )
        )
    caption = ""
    if k.tensor_core_share is not None:
        caption = (
            f"GEMM/conv {k.matmul_ms:.1f} ms, on tensor cores "
            f"{k.tensor_core_share:.0%}; by dtype: "
            + ", ".join(f"{d} {v:.1f} ms" for d, v in k.matmul_ms_by_dtype.items() if v >= 0.05)
        )
    caption = ". ".join(x for x in (caption, *kernel_notes(k)) if x)
    steps = f"{a.n_steps} step{'s' * (a.n_steps != 1)}"
    title = f"Top kernels (of {k.kernel_count} in {steps})"
    return TableText(columns, tuple(rows), title=title, caption=caption)


def operator_tables(a: TraceAnalysis, top: int) -> list[TableText]:
    """key_averages-style tables: top operators by self device time (GPU traces) and self CPU."""
    ops = a.operators
    out = []
    if a.has_gpu and ops.top_by_self_device:
        out.append(_op_table(ops.top_by_self_device, "self device", top, device=True))
    if ops.top_by_self_cpu:
        out.append(_op_table(ops.top_by_self_cpu, "self CPU", top, device=a.has_gpu))
    return out


def _op_table(rows: Any, key: str, top: int, device: bool) -> TableText:
    heads = ["calls", "self CPU ms", "CPU total ms"]
    if device:
        heads += ["self device ms", "device total ms"]
    columns = (Column("operator", right=False, flex="shorten"), *(Column(h) for h in heads))
    out = []
    for r in rows[:top]:
        cells = [str(r.calls), f"{r.self_cpu_ms:.2f}", f"{r.total_cpu_ms:.2f}"]
        if device:
            cells += [f"{r.self_device_ms:.2f}", f"{r.total_device_ms:.2f}"]
        out.append((r.name, *cells))
    return TableText(columns, tuple(out), title=f"Top operators by {key} time")
