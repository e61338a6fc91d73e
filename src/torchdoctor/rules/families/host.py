"""Host bound: the device idles because the CPU launches work too late (Python, dispatcher and
launch cost per operator), as the trace shows it.

The run-level rule (``rules/run_rules.py``: a CPU run's for-loop optimizers) shares this id and
this registry entry; its fix passes the optimizers to :func:`host_bound_fix`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import same_cause as sc
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.inference_fixes import graphs_already_fix
from torchdoctor.rules.spec import (
    FindingSpec,
    Measured,
    SameCause,
    SeverityPolicy,
    TraceRule,
    Variant,
)

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis
    from torchdoctor.analysis.launch import LaunchStats
    from torchdoctor.record.rows import Optimizer

LAUNCH_KEYS = (
    "kernels_per_step",
    "median_kernel_us",
    "median_launch_cost_us",
    "share_shorter_than_launch",
    "graph_launch_count",
)
"""The launch statistics the evidence carries (those the trace has)."""


def host_bound_fix(for_loop_optimizers: Sequence[Optimizer] | None = None, graphs: int = 0) -> str:
    """compile and CUDA graphs on a GPU; with a CPU run's for-loop optimizers, compile plus the
    faster implementation each has; on a step that already replays graphs (``graphs``
    launches), never graphs again: the launches left are outside them."""
    if graphs:
        return graphs_already_fix(graphs)
    return fx.host_bound_fix(for_loop_optimizers)


SPEC = FindingSpec(
    id="host-bound",
    label="launch overhead",
    title="Host bound: the GPU waits {ms:.1f} ms per step ({share:.0%}) for the CPU to launch work",
    sources=("run",),  # its rule on a CPU run, written by hand (rules/run_rules.py)
    severity=SeverityPolicy(th.HOST_WARN, th.HOST_CRITICAL),
    threshold=th.HOST_WARN,
    fix=host_bound_fix,
    explanation="Each op pays Python, dispatcher and launch cost before the GPU sees it; when "
    "kernels are shorter than that cost the GPU runs dry. Fusion and CUDA graphs cut the "
    "launches.",
    doc_url=f"{fx.DOCS}/generated/torch.compile.html",
    knobs=("compile", "optimizer_impl"),
    codemods=("fused-optimizer", "compile-model"),
    # the host's small operators are the work beside the step: its remedy, not compile's
    same_cause=(SameCause("work-beside-step", sc.host_time_at_the_work),),
    variants=(
        (
            "cpu",  # the run-level rule on a CPU run (rules/run_rules.py: tiny_ops)
            Variant(
                title="{n:.0f} operators per step, median {median_us:.1f} us: {ms:.1f} ms per "
                "step in tiny operators and the Python between them (matmul, convolution, "
                "recurrent and attention ops: {compute:.0%} of the step)",
                explanation="Each operator pays Python, dispatcher (and on a GPU, launch) "
                "overhead of several microseconds; hundreds of tiny ones per step cost more "
                "than their arithmetic.",
            ),
        ),
        (
            "compiled-cpu",  # the same rule once the model is compiled and nothing is left
            Variant(
                title="Already compiled, no for-loop optimizer: {n:.0f} operators per step "
                "are left, median {median_us:.1f} us, {ms:.1f} ms per step with the Python "
                "between them: the compiled graph's own calls, which a CPU step keeps",
                explanation="torch.compile leaves one call per matrix product (and its wrapper "
                "around each); on a GPU CUDA graphs would replay them at once, on a CPU "
                "nothing fuses them further. A larger batch keeps their cost per step and "
                "spreads it over more samples.",
            ),
        ),
    ),
    frameworks=(
        (
            "lightning",
            lambda f: (
                "# in your LightningModule:\n"
                "def configure_model(self):\n"
                "    self.model = torch.compile(self.model)"
            ),
        ),
        ("transformers", lambda f: "TrainingArguments(..., torch_compile=True)"),
    ),
)


def measure(a: TraceAnalysis) -> Measured | None:
    """The device idle the breakdown blames on late launches (``host_overhead``)."""
    if not a.has_gpu or not a.mean_step_ms:
        return None
    ms = a.per_step_ms(a.total.idle_ms.get("host_overhead", 0.0))
    share = ms / a.mean_step_ms
    evidence: dict[str, Any] = {
        "host_late_idle_ms_per_step": round(ms, 3),
        "share_of_step": round(share, 4),
        "gpu_busy_share": round(a.gpu_busy_share, 4),
        **launch_evidence(a.launch),
    }
    return Measured(
        value=share,
        saving_ms=ms,
        title={"ms": ms, "share": share},
        evidence=evidence,
        fix={"graphs": a.launch.graph_launch_count or 0},
    )


def launch_evidence(launch: LaunchStats | None) -> dict[str, Any]:
    """The launch statistics the trace has, rounded."""
    out: dict[str, Any] = {}
    for key in LAUNCH_KEYS:
        value = getattr(launch, key, None)
        if value is not None:
            out[key] = round(value, 4) if isinstance(value, float) else value
    return out


RULES = (TraceRule(SPEC, measure),)
