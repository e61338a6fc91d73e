"""Memory-bound unfused work: elementwise, copy and reduction kernels (eager PyTorch launches one
per operator) taking a large share of a busy device's time.

Each such kernel reads its inputs from device memory and writes its output back; a chain of
them (a norm's ``pow``/``mean``/``rsqrt``/``mul``, a rotary embedding's ``mul``/``cat``/``add``,
casts, an activation) moves the same tensor once per operator where one fused kernel would move
it once. Their time is set by memory traffic and launch count, not by arithmetic, and it is the
time ``torch.compile`` removes.

The bytes a fused kernel would still move depend on which intermediates it keeps out of memory,
which a trace does not show, so the fusion floor (those bytes at the device's bandwidth) is not
computed: the saving is the documented fraction ``FUSION_SAVING`` of their time. Where shapes
were recorded, the evidence gives the bandwidth the unfused kernels reach
(``analysis/elementwise_traffic.py``). Kernels Inductor already generated (the ``triton`` family:
``triton_poi_fused_...``) are fused work and never count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from torchdoctor.analysis._join import gpu_rows, in_window
from torchdoctor.analysis.elementwise_traffic import traffic_of
from torchdoctor.analysis.kernel_names import classify_kernel
from torchdoctor.analysis.op_classes import classify_op
from torchdoctor.hardware import memory_bandwidth
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, Gate, Measured, SeverityPolicy, TraceRule
from torchdoctor.trace.arrays import unique_codes
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.server_steps import detect_engine

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis

UNFUSED_CATEGORIES = frozenset({"elementwise", "reduction"})
"""Kernel categories (``analysis/kernel_names.py``) of per-operator memory-bound work; a
``torch.cat`` (``CatArrayBatchedCopy``) and a dtype cast are elementwise there."""
FUSED_FAMILIES = frozenset({"triton"})
"""Kernel families that are fused already (Inductor's generated kernels)."""
TOP_KERNELS = 3
"""How many kernel names (and launching operators) the evidence lists."""


ENGINES_THAT_COMPILE = frozenset({"vLLM", "SGLang"})
"""Serving engines that own their model's step and compile it themselves when allowed to."""


def unfused_fix(inference: bool = True, engine: str = "unknown") -> str:
    """Compile the step; for inference, compile the decode step with CUDA graphs and give it a
    static KV cache (a dynamic cache grows by ``torch.cat`` every token and changes shape, which
    keeps the step eager and out of graphs); in a serving engine, its own compiled mode."""
    if engine in ENGINES_THAT_COMPILE:
        return (
            f"# {engine} compiles and graphs its own step: run it without the eager switch\n"
            "# vLLM: do not pass enforce_eager=True; SGLang: --enable-torch-compile"
        )
    if not inference:
        return (
            "model = torch.compile(model)  # fuses elementwise/reduction chains into few kernels\n"
            "# each fused kernel reads and writes a tensor once instead of once per operator"
        )
    return (
        'if hasattr(model, "generation_config"):  # Hugging Face transformers: a static KV cache\n'
        '    model.generation_config.cache_implementation = "static"  # no torch.cat per token\n'
        "# compile the forward (decode step): Inductor fuses norms, rotary embeddings,\n"
        "# activations and casts; reduce-overhead replays the step as a CUDA graph\n"
        'model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)\n'
        "# your own loop: allocate transformers.StaticCache(...) once, pass past_key_values=it,\n"
        "# and compile the function that runs one decode step the same way"
    )


SPEC = FindingSpec(
    id="unfused-memory-bound",
    label="unfused memory-bound kernels",
    title="Unfused memory-bound kernels: {share:.0%} of GPU time ({ms:.1f} ms per step) in "
    "{count:.0f} elementwise/copy/reduction kernels per step (most under {top})",
    severity=SeverityPolicy(th.WARNING_SHARE, th.CRITICAL_SHARE),
    threshold=th.UNFUSED_SHARE,
    gates=(Gate("gpu_busy_share", th.UNFUSED_BUSY),),
    fix=unfused_fix,
    explanation="Eager PyTorch runs one kernel per operator: each elementwise, copy or reduction "
    "kernel reads its inputs from device memory and writes its output back, so a chain of them "
    "moves the same tensor many times and pays a launch each. Fused (torch.compile), the chain "
    "moves it once; with a static KV cache the decode step keeps one shape and can run as a "
    "CUDA graph. The saving is an estimated half of these kernels' time (what a fused kernel "
    "would still move is not in the trace, so the fusion floor is not computed).",
    doc_url=f"{fx.DOCS}/generated/torch.compile.html",
    knobs=("compile",),
    codemods=("compile-model",),
)


def _short(name: str) -> str:
    """A kernel name without ``void``, namespaces, template and call arguments."""
    n = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    for stop in ("<", "("):
        if stop in n:
            n = n[: n.index(stop)]
    return n.rsplit("::", 1)[-1].strip() or name


def _unfused_kernels(a: TraceAnalysis) -> tuple[dict[str, tuple[int, float]], np.ndarray]:
    """Short kernel name -> (launches, summed µs) of the unfused kernels in the window, and
    their rows."""
    t = a.table
    rows = in_window(t, a.steps, gpu_rows(t))
    rows = rows[t.kind[rows] == Kind.KERNEL]
    if not len(rows):
        return {}, rows
    codes, inv, _ = unique_codes(t.name[rows])
    dur = np.bincount(inv, t.dur[rows].astype(np.float64))
    counts = np.bincount(inv)
    keep = np.zeros(len(codes), dtype=bool)
    out: dict[str, tuple[int, float]] = {}
    for i, (c, us, n) in enumerate(zip(codes.tolist(), dur.tolist(), counts.tolist(), strict=True)):
        name = t.names[int(c)]
        info = classify_kernel(name)
        if info.category not in UNFUSED_CATEGORIES or info.family in FUSED_FAMILIES:
            continue
        keep[i] = True
        key = _short(name)
        had = out.get(key, (0, 0.0))
        out[key] = (had[0] + int(n), had[1] + float(us))
    return out, rows[keep[inv]]


def _bandwidth(a: TraceAnalysis, rows: np.ndarray) -> dict[str, Any]:
    """The rate the shape-recorded elementwise kernels reach (a lower bound), against the
    device's peak where ``hardware.py`` knows it; empty without recorded shapes."""
    got = traffic_of(a.table, rows)
    if got is None:
        return {}
    rate = got.achieved_bytes_per_s
    out: dict[str, Any] = {
        "achieved_gb_per_s": round(rate / 1e9, 1),
        "bytes_known_share_of_unfused_time": round(got.covered_share, 4),
    }
    gpu = a.kernels.gpu
    peak = memory_bandwidth(gpu.name, gpu.total_memory_bytes) if gpu.name else None
    if peak:
        out["peak_gb_per_s"] = round(peak[0] / 1e9, 1)
        out["share_of_peak_bandwidth"] = round(rate / peak[0], 4)
    return out


def _has_backward(a: TraceAnalysis) -> bool:
    """Autograd ran in the trace (a training step, not inference)."""
    return any("Backward" in n or n.startswith("autograd::engine") for n in a.table.names)


def measure(a: TraceAnalysis) -> Measured | None:
    """Elementwise/copy/reduction kernel time (Inductor's own kernels aside) as a share of all
    device activity; the gate is the device's busy share (an idle device is not sped up by
    faster kernels); the saving ``FUSION_SAVING`` of that time per step."""
    k = a.kernels
    if not a.has_gpu or k is None or k.gpu_time_ms <= 0 or not a.mean_step_ms:
        return None
    kernels, rows = _unfused_kernels(a)
    if not kernels:
        return None
    launches = sum(n for n, _ in kernels.values())
    total_ms = sum(us for _, us in kernels.values()) / 1e3
    share = total_ms / k.gpu_time_ms
    ms = a.per_step_ms(total_ms)
    saving = ms * th.FUSION_SAVING
    top = sorted(kernels.items(), key=lambda kv: -kv[1][1])[:TOP_KERNELS]
    per_step = a.per_step_ms(float(launches))
    ops = [
        r
        for r in a.operators.top_by_self_device
        if classify_op(r.name) == "other" and r.self_device_ms > 0
    ][:TOP_KERNELS]
    evidence: dict[str, Any] = {
        "unfused_share_of_gpu_time": round(share, 4),
        "unfused_ms_per_step": round(ms, 3),
        "gpu_time_ms_per_step": round(a.per_step_ms(k.gpu_time_ms), 3),
        "unfused_kernels_per_step": round(per_step),
        "mean_kernel_us": round(total_ms * 1e3 / launches, 1),
        "top_kernels_per_step": {n: round(a.per_step_ms(float(c))) for n, (c, _) in top},
        "top_operators_self_device_ms": {
            r.name: round(a.per_step_ms(r.self_device_ms), 3) for r in ops
        },
        **_bandwidth(a, rows),
        "gpu_busy_share": round(a.gpu_busy_share, 4),
        "assumed_fusion_saving": float(th.FUSION_SAVING),
    }
    name, (count, _) = top[0]
    lead = (
        f"{ops[0].name}, {a.per_step_ms(ops[0].self_device_ms):.1f} ms"
        if ops
        else f"{name}, {round(a.per_step_ms(float(count)))} launches"
    )
    return Measured(
        value=share,
        saving_ms=saving,
        title={
            "share": share,
            "ms": ms,
            "count": per_step,
            "top": lead,
        },
        evidence=evidence,
        fix={"inference": not _has_backward(a), "engine": detect_engine(a.table)},
        where=tuple(r.name for r in ops),
        gates={"gpu_busy_share": a.gpu_busy_share},
    )


RULES = (TraceRule(SPEC, measure),)
