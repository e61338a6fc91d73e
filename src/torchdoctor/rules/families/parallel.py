"""nn.DataParallel: one process drives several GPUs, scattering inputs, re-replicating the
model and gathering outputs every step from one Python thread.

One spec, two rules: the trace's (``analyze``: kernels on several devices, DataParallel's own
operators) and the check run's (``check`` saw the nn.DataParallel built; its own wording, the
variant ``built``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from torchdoctor.record.typed import plain
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families._common import count_names
from torchdoctor.rules.spec import (
    FindingSpec,
    Measured,
    RunRule,
    SeverityPolicy,
    TraceRule,
    Variant,
    static,
)
from torchdoctor.trace.arrays import distinct
from torchdoctor.trace.kinds import Kind

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis
    from torchdoctor.record.run import RunRecord

SPEC = FindingSpec(
    id="data-parallel",
    label="nn.DataParallel",
    title="nn.DataParallel: one process drives {devices} GPUs; use DistributedDataParallel",
    severity=SeverityPolicy(floor="warning"),
    fix=static(fx.DATA_PARALLEL_TRACE),
    explanation="nn.DataParallel replicates the model and scatters inputs from one Python "
    "thread every step; DDP runs one process per GPU and overlaps gradient all-reduce with "
    "backward.",
    doc_url=f"{fx.DOCS}/notes/ddp.html",
    knobs=("ddp_bucket_cap_mb",),
    variants=(
        (
            "built",  # the run-level rule: check saw the nn.DataParallel built
            Variant(
                title="nn.DataParallel in use: one process drives every GPU",
                explanation="DataParallel scatters inputs, re-replicates the model every step "
                "and gathers outputs on GPU 0, with one Python thread per GPU contending for "
                "the GIL.",
                fix=static(
                    "torchrun --nproc_per_node=NGPU train.py  # with\n"
                    "model = torch.nn.parallel.DistributedDataParallel(model, "
                    "device_ids=[local_rank])"
                ),
            ),
        ),
    ),
    frameworks=(("lightning", lambda f: 'Trainer(accelerator="gpu", devices=-1, strategy="ddp")'),),
)


def is_data_parallel_op(name: str) -> bool:
    """Names only nn.DataParallel produces (DistributedDataParallel's contain "Distributed")."""
    if "Distributed" in name:
        return False
    return (
        name in ("DataParallel.forward", "nn.Module: DataParallel")
        or "nn/parallel/data_parallel.py" in name
        or any(k in name for k in ("ReduceAddCoalesced", "BroadcastBackward", "Gather.apply"))
    )


def measure(a: TraceAnalysis) -> Measured | None:
    """Kernels on two or more devices from this one process, or DataParallel's own operators:
    either is the finding (no threshold). The saving is the estimate ``check`` uses too,
    ``DATA_PARALLEL_SHARE`` of the step (DDP is typically >= 1.3x faster on one node)."""
    devices = distinct(a.table.device[a.activity.rows]) if a.has_gpu else np.zeros(0)
    ops = count_names(
        a, is_data_parallel_op, Kind.CPU_OP, Kind.PYTHON_FUNCTION, Kind.USER_ANNOTATION
    )
    if len(devices) < 2 and not ops:
        return None
    return Measured(
        value=float(len(devices)),
        saving_ms=a.mean_step_ms * th.DATA_PARALLEL_SHARE,
        share=0.0,  # graded at its floor: a warning, whatever the estimate
        title={"devices": len(devices)},
        evidence={"devices_in_one_process": [int(d) for d in devices], "data_parallel_ops": ops},
    )


def measure_run(run: RunRecord) -> Measured | None:
    """An nn.DataParallel built in the run (any one fires), with the trace's estimate."""
    dp = run.config.data_parallel
    if not dp:
        return None
    saving = (run.step_ms or 0.0) * th.DATA_PARALLEL_SHARE
    return Measured(
        value=float(len(dp)),
        saving_ms=saving,
        evidence={"data_parallel": plain(dp)},
        variant="built",
    )


RULES = (TraceRule(SPEC, measure), RunRule(SPEC, measure_run))
