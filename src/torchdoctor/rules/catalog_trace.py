"""Registry entries of the findings read from a trace (``torchdoctor analyze``) or a folder of ranks."""

from __future__ import annotations

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, SeverityPolicy, static

# Memory findings point at the command that explains a snapshot.
MEMORY_COMMAND = (
    "To see which code holds the memory at the peak and how fragmented the cache is, record a "
    "snapshot (`torchdoctor check --memory`, or `Runtime(memory_history=True)`) and run "
    "`torchdoctor memory SNAPSHOT.pickle` (docs/memory.md)."
)

D = fx.DOCS

TRACE_SPECS: tuple[FindingSpec, ...] = (
    FindingSpec(
        id="sync-stalls",
        label="synchronisation stalls",
        title="Synchronisation stalls: {ms:.1f} ms per step ({share:.0%}) of GPU idle after the "
        "CPU blocked on the device",
        sources=("trace",),
        severity=SeverityPolicy(th.SYNC_WARN, th.SYNC_CRITICAL),
        threshold=th.SYNC_WARN,
        fix=static(fx.SYNC_STALLS),
        explanation="A synchronising call (.item(), .cpu(), torch.cuda.synchronize, a blocking "
        "copy) makes the CPU wait until the GPU finishes, so nothing is queued when it does.",
        doc_url=f"{D}/generated/torch.cuda.set_sync_debug_mode.html",
        codemods=("sync-every-n",),
    ),
    FindingSpec(
        id="fp32-gemm-no-tensor-cores",
        label="fp32 GEMMs off the tensor cores",
        title="fp32 GEMMs off the tensor cores: {fp32_share:.0%} of matmul time on a {gpu} (use "
        "{precision})",
        sources=("trace",),
        severity=SeverityPolicy(th.FP32_GEMM_WARN, th.FP32_GEMM_CRITICAL),
        threshold=th.FP32_GEMM_SHARE,
        fix=fx.fp32_gemm_fix,
        explanation="fp32 matrix multiplies run on the SIMT cores; in bf16/fp16 (or TF32) they run "
        "on the tensor cores at several times the throughput.",
        doc_url=f"{D}/amp.html",
        knobs=("precision",),
        codemods=("bf16-autocast", "tf32-matmul"),
    ),
    FindingSpec(
        id="exposed-communication",
        label="exposed communication",
        title="Exposed communication: {ms:.1f} ms per step ({share:.0%}) of collectives not "
        "overlapped with compute ({overlap:.0%} hidden)",
        sources=("trace",),
        severity=SeverityPolicy(th.EXPOSED_COMM_WARN, th.EXPOSED_COMM_CRITICAL),
        threshold=th.EXPOSED_COMM_WARN,
        fix=fx.exposed_comm_fix,
        explanation="DDP overlaps each gradient bucket's all-reduce with the rest of backward; "
        "exposed time means buckets finish late (too large, a sync in backward, or no compute "
        "left to hide behind).",
        doc_url=f"{D}/notes/ddp.html",
        knobs=("ddp_bucket_cap_mb",),
    ),
    FindingSpec(
        id="exposed-all-gather",
        label="exposed FSDP all-gather",
        title="Exposed all-gather (FSDP): {ms:.1f} ms per step ({share:.0%}) waiting for "
        "parameters to be gathered ({overlap:.0%} hidden under compute)",
        sources=("trace",),
        severity=SeverityPolicy(th.EXPOSED_COMM_WARN, th.EXPOSED_COMM_CRITICAL),
        threshold=th.EXPOSED_COMM_WARN,
        fix=fx.fsdp_prefetch_fix,
        explanation="FSDP gathers each unit's parameters before its forward and backward; "
        "unless the gather for the next unit is issued while the current one computes "
        "(prefetch), every unit starts by waiting for the network.",
        doc_url=f"{D}/distributed.fsdp.fully_shard.html",
        knobs=(),
    ),
    FindingSpec(
        id="data-parallel",
        label="nn.DataParallel",
        title="nn.DataParallel: one process drives {devices} GPUs; use DistributedDataParallel",
        sources=("trace", "run"),
        severity=SeverityPolicy(floor="warning"),
        threshold=th.DATA_PARALLEL_SHARE,
        fix=static(fx.DATA_PARALLEL_TRACE),
        explanation="nn.DataParallel replicates the model and scatters inputs from one Python "
        "thread every step; DDP runs one process per GPU and overlaps gradient all-reduce with "
        "backward.",
        doc_url=f"{D}/notes/ddp.html",
        knobs=("ddp_bucket_cap_mb",),
    ),
    FindingSpec(
        id="memory-pressure",
        label="memory pressure",
        title="Memory pressure on GPU {device}: {what}",
        sources=("trace",),
        severity=SeverityPolicy(fixed="warning", risk=True),
        threshold=th.MEMORY_PRESSURE,
        fix=static(fx.MEMORY_PRESSURE),
        explanation="Peak memory is close to the device's capacity: one larger batch or a "
        "fragmented pool fails with out-of-memory. " + MEMORY_COMMAND,
        doc_url=f"{D}/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf",
    ),
    FindingSpec(
        id="straggler-rank",
        label="a straggler rank",
        title="Straggler: rank {rank} works {excess:.1f} ms per step longer than the median rank "
        "({ratio:.0%})",
        sources=("ranks",),
        severity=SeverityPolicy(th.STRAGGLER, th.STRAGGLER_CRITICAL, floor="warning"),
        threshold=th.STRAGGLER,
        fix=static(fx.STRAGGLER),
        explanation="Collectives wait for the slowest rank, so every rank runs at its speed.",
        doc_url=f"{D}/notes/ddp.html",
    ),
)
