"""Collectives the step waits for: DDP's gradient all-reduce not hidden under backward (or, on
the CPU, gloo collectives that block the training thread), and FSDP's two costs told apart:
the parameter all-gather a unit waits for before it computes (fixed by prefetching) and the
gradient reduce-scatter after its backward (fixed by finer units and fewer reductions)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families._common import share_of_step
from torchdoctor.rules.spec import FindingSpec, Measured, SeverityPolicy, TraceRule, Variant

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis

D = fx.DOCS
GATHER = ("AllGather",)
REDUCTION = ("ReduceScatter", "AllReduce", "Reduce")

# both collectives' findings: device time, fired and graded on the share of the step exposed
_collective_spec = partial(
    FindingSpec,
    probe="kernel",
    severity=SeverityPolicy(th.EXPOSED_COMM_WARN, th.EXPOSED_COMM_CRITICAL),
    threshold=th.EXPOSED_COMM_WARN,
)

EXPOSED_SPEC = _collective_spec(
    id="exposed-communication",
    label="exposed communication",
    title="Exposed communication: {ms:.1f} ms per step ({share:.0%}) of collectives not "
    "overlapped with compute ({overlap:.0%} hidden)",
    fix=fx.exposed_comm_fix,
    explanation="DDP overlaps each gradient bucket's all-reduce with the rest of backward; "
    "exposed time means buckets finish late (too large, a sync in backward, or no compute "
    "left to hide behind).",
    doc_url=f"{D}/notes/ddp.html",
    knobs=("ddp_bucket_cap_mb",),
    variants=(
        (
            "fsdp-reduction",
            Variant(
                title="Exposed gradient reduction (FSDP): {ms:.1f} ms per step ({share:.0%}) of "
                "reduce-scatter not overlapped with backward ({overlap:.0%} hidden)",
                explanation="FSDP reduce-scatters each unit's gradients after its backward; it "
                "hides under the next unit's backward unless the units are coarse or it is the "
                "last one.",
                fix=fx.fsdp_reduce_fix,
            ),
        ),
        (
            "cpu",
            Variant(
                title="Exposed communication: the loop waits {ms:.1f} ms per step "
                "({share:.0%}) in CPU collectives",
                explanation="CPU collectives run on the training thread and wait for every "
                "rank, so this time is transfer plus waiting for the slowest rank.",
            ),
        ),
    ),
    frameworks=(
        (
            "lightning",
            lambda f: (
                "from lightning.pytorch.strategies import DDPStrategy\n"
                "Trainer(strategy=DDPStrategy(gradient_as_bucket_view=True, static_graph=True))\n"
                "# or fewer reductions per sample: Trainer(accumulate_grad_batches=4)"
            ),
        ),
        (
            "transformers",
            lambda f: (
                "TrainingArguments(..., gradient_accumulation_steps=4)\n"
                "# accumulation all-reduces once per optimizer step, not once per micro-batch"
            ),
        ),
    ),
)


def exposed_communication(a: TraceAnalysis) -> Measured | None:
    """Collective time the step waits for instead of overlapping it with backward compute.

    Under FSDP only the gradient reduction counts (all-gather is ``exposed-all-gather``); on
    the CPU all of gloo's time blocks the loop; on a GPU, the collectives' exposed time plus the
    device idle while the CPU waited inside a collective call (communication, never host time).
    """
    c = a.comm
    if c.fsdp:
        return _fsdp_exposed(a, REDUCTION, variant="fsdp-reduction")
    if not a.has_gpu:
        ms = a.per_step_ms(a.total.idle_ms.get("communication", 0.0))
        share = share_of_step(a, ms)
        return Measured(
            value=share,
            saving_ms=ms,
            title={"ms": ms, "share": share},
            evidence={
                "cpu_collective_ms_per_step": round(ms, 3),
                "share_of_step": round(share, 4),
                "backend": a.table.meta.backend,
                "world_size": a.table.meta.world_size,
            },
            fix={"cpu": True},
            variant="cpu",
        )
    waited = a.per_step_ms(a.total.idle_ms.get("collective_wait", 0.0))
    if c.comm_ms <= 0 and waited <= 0:
        return None
    ms = a.per_step_ms(c.exposed_ms) + waited
    share = share_of_step(a, ms)
    return Measured(
        value=share,
        saving_ms=ms,
        title={"ms": ms, "share": share, "overlap": c.overlap_share},
        evidence={
            "comm_ms_per_step": round(a.per_step_ms(c.comm_ms), 3),
            "exposed_comm_ms_per_step": round(ms, 3),
            "gpu_idle_in_cpu_collectives_ms_per_step": round(waited, 3),
            "overlap_share": round(c.overlap_share, 4),
            "collectives": c.collectives,
            "world_size": c.world_size,
        },
    )


GATHER_SPEC = _collective_spec(
    id="exposed-all-gather",
    label="exposed FSDP all-gather",
    title="Exposed all-gather (FSDP): {ms:.1f} ms per step ({share:.0%}) waiting for "
    "parameters to be gathered ({overlap:.0%} hidden under compute)",
    fix=fx.fsdp_prefetch_fix,
    explanation="FSDP gathers each unit's parameters before its forward and backward; "
    "unless the gather for the next unit is issued while the current one computes "
    "(prefetch), every unit starts by waiting for the network.",
    doc_url=f"{D}/distributed.fsdp.fully_shard.html",
    frameworks=(
        (
            "lightning",
            lambda f: (
                "from torch.distributed.fsdp import BackwardPrefetch\n"
                "from lightning.pytorch.strategies import FSDPStrategy\n"
                "Trainer(strategy=FSDPStrategy(forward_prefetch=True,\n"
                "                              backward_prefetch=BackwardPrefetch.BACKWARD_PRE))\n"
                "# FSDP2 (ModelParallelStrategy): in configure_model, after fully_shard:\n" + f.fix
            ),
        ),
        (
            "transformers",
            lambda f: (
                'TrainingArguments(..., fsdp="full_shard auto_wrap",\n'
                '                  fsdp_config={"forward_prefetch": True, '
                '"backward_prefetch": "backward_pre"})'
            ),
        ),
    ),
)


def exposed_all_gather(a: TraceAnalysis) -> Measured | None:
    """FSDP parameter all-gathers the step waits for (not prefetched under compute)."""
    return _fsdp_exposed(a, GATHER) if a.comm.fsdp else None


def _fsdp_exposed(a: TraceAnalysis, kinds: tuple[str, ...], variant: str | None = None) -> Measured:
    """FSDP collectives of ``kinds`` the step waits for: value their exposed share of the step,
    saving their exposed ms per step, ``overlap`` the share of their time hidden under compute."""
    c = a.comm
    total = sum(c.by_kind.get(k, {}).get("comm_ms", 0.0) for k in kinds)
    exposed = c.exposed_ms_of(*kinds)
    ms = a.per_step_ms(exposed)
    share = share_of_step(a, ms)
    hidden = 1.0 - exposed / total if total > 0 else 0.0
    return Measured(
        value=share,
        saving_ms=ms,
        title={"ms": ms, "share": share, "overlap": hidden},
        evidence={
            "collectives": {k: c.collectives.get(k, 0) for k in kinds if k in c.collectives},
            "comm_ms_per_step": round(a.per_step_ms(total), 3),
            "exposed_ms_per_step": round(ms, 3),
            "overlap_share": round(hidden, 4),
            "on_cpu": not a.has_gpu,
            "backend": c.backend,
            "world_size": c.world_size,
        },
        fix={"cpu": not a.has_gpu},
        variant=variant,
    )


RULES = (TraceRule(EXPOSED_SPEC, exposed_communication), TraceRule(GATHER_SPEC, exposed_all_gather))
