"""Fix builders: the code a user pastes, built from what the rule measured.

Each builder takes typed inputs (``record/run.py`` for run-level findings, plain values for
trace ones) and returns the text. The registry (``rules/catalog_*.py``) names one per finding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torchdoctor.rules.sites import relative_site

# The run fixes import rules/user_fixes.py and rules/optimizer_fixes.py where they use them:
# analyze imports this module for its trace fixes only.
if TYPE_CHECKING:  # a trace analysis never builds run inputs: not imported by analyze
    from torchdoctor.record.rows import Optimizer
    from torchdoctor.record.run import LoaderConfig

DOCS = "https://pytorch.org/docs/stable"


# -- trace findings ----------------------------------------------------------------------------
HOST_BOUND = (
    'model = torch.compile(model, mode="reduce-overhead")  # fuses ops, replays CUDA graphs\n'
    "# or capture the step with torch.cuda.graphs; a larger batch also amortises launches"
)
SYNC_STALLS = (
    'torch.cuda.set_sync_debug_mode("warn")  # prints every synchronising call site\n'
    "# then keep values on the device: log loss.detach() and call .item() every N steps"
)
PAGEABLE = (
    "loader = DataLoader(dataset, ..., pin_memory=True)\n"
    "x = x.to(device, non_blocking=True)  # asynchronous only from pinned memory"
)
SYNC_COPIES = (
    "x = x.pin_memory().to(device, non_blocking=True)  # host to device, asynchronous\n"
    'out = y.to("cpu", non_blocking=True); torch.cuda.current_stream().synchronize()  # once'
)
LOW_UTIL = (
    "# raise the work per launch: a larger batch, torch.compile to fuse small kernels,\n"
    '# and CUDA graphs (mode="reduce-overhead") for the remaining gaps'
)
DATA_PARALLEL_TRACE = (
    "torchrun --nproc_per_node=NUM_GPUS train.py  # one process per GPU\n"
    "model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])"
)
MEMORY_PRESSURE = (
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py\n"
    "# and/or activation checkpointing, a smaller micro-batch with gradient accumulation"
)
STRAGGLER = (
    "# compare the slow rank's breakdown: torchdoctor analyze RUN_DIR/rank<N>.json.gz\n"
    "# typical causes: uneven data shards, a slower host or GPU, extra work on one rank"
)


def autocast_fix(
    dtype: str, device: str | None = None, site: str | None = None, code: str | None = None
) -> str:
    """``with torch.autocast(...)`` over the step's forward and loss: the user's own statements
    (``code``, at ``site``) when read from the script (``rules/step_forward.py``), else the usual
    names. ``device`` is the expression the step copies its batch to: the autocast takes its type
    (``torch.device(device).type``), so the pasted line runs in ``dtype`` wherever the script
    runs (an autocast for a device the tensors are not on does nothing); ``"cuda"`` when none is
    known, the device of the runs these findings come from."""
    kind = f"torch.device({device}).type" if device else '"cuda"'
    body = code if code else "loss = criterion(model(x), y)"
    at = f"  # at {relative_site(site)}" if site and code else ""
    return f"with torch.autocast(device_type={kind}, dtype=torch.{dtype}):{at}\n" + "\n".join(
        f"    {ln}" if ln.strip() else "" for ln in body.splitlines()
    )


def fp32_gemm_fix(bf16: bool = True, device: str | None = None) -> str:
    """bf16 autocast or TF32 from Ampere on; fp16 with GradScaler on Volta/Turing."""
    if bf16:
        return (
            "# bf16 tensor cores (fp16 + GradScaler before Ampere)\n"
            f"{autocast_fix('bfloat16', device)}\n"
            "torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True"
        )
    return (
        'scaler = torch.amp.GradScaler("cuda")\n'
        f"{autocast_fix('float16', device)}\n"
        "scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()"
    )


def fp32_bf16_gpu_fix(
    device: str | None = None, site: str | None = None, code: str | None = None
) -> str:
    """fp32 training on a GPU with bf16 tensor cores: the step's forward under bf16 autocast."""
    return f"{autocast_fix('bfloat16', device, site, code)}\n# bf16 has fp32's range: no GradScaler"


def exposed_comm_fix(cpu: bool = False) -> str:
    """DDP bucket settings; on CPU collectives, first look at every rank (the wait includes them)."""
    if cpu:
        return (
            "# the wait includes the slowest rank's lateness: analyse all ranks' traces together\n"
            "torchdoctor analyze TRACE_FOLDER/\n"
            "model = DDP(model, gradient_as_bucket_view=True)  # buckets are views: no copy"
        )
    return (
        "model = DDP(model, device_ids=[local_rank],\n"
        "            gradient_as_bucket_view=True, static_graph=True)\n"
        "# with accumulation: with model.no_sync(): ... on the inner micro-batches"
    )


def no_sync_fix(micro_batches: float) -> str:
    """DDP under gradient accumulation: all-reduce on the last micro-batch only."""
    return (
        f"# {micro_batches:.0f} backward passes per optimizer step, each all-reducing the "
        "gradients: reduce on the last one only\n"
        "for i, (x, y) in enumerate(micro_batches):\n"
        "    last = i == len(micro_batches) - 1\n"
        "    with contextlib.nullcontext() if last else model.no_sync():\n"
        "        criterion(model(x), y).backward()\n"
        "optimizer.step()"
    )


def data_loader_fix(gpu: bool = True) -> str:
    """Workers, kept across epochs, prefetching; pinned batches only where a GPU copies them.
    Without one, ``pin_memory=True`` pins nothing and torch warns that no accelerator is found;
    it is left out rather than written ``pin_memory=torch.cuda.is_available()``: the trace does
    not say how the script imports torch, and a non-literal argument is one ``fix`` would no
    longer edit on a later GPU run (it refuses an argument set from an expression)."""
    pin = "pin_memory=True, " if gpu else ""
    return (
        "loader = DataLoader(dataset, batch_size=bs, num_workers=min(8, os.cpu_count()),\n"
        f"                    {pin}persistent_workers=True, prefetch_factor=4)"
    )


_DEPENDENCY_FIXES = {
    "first-launch": "# the first launch of each kernel loads its code: warm up before timing, and\n"
    "# load modules eagerly: CUDA_MODULE_LOADING=EAGER (or HIP: run one warm-up step)",
    "collective": "# a collective waits for the slowest rank: compare ranks with\n"
    "torchdoctor analyze TRACE_FOLDER/\n"
    "# and overlap it with backward:\n"
    "model = DDP(model, gradient_as_bucket_view=True)",
    "stream-wait": "# a stream waits on an event from another stream: record the event earlier or\n"
    "# move the dependent work later (torch.cuda.Stream / event.wait placement)",
    "blocking-copy": "x = x.pin_memory().to(device, non_blocking=True)  # no blocking copy\n"
    'y_cpu = y.to("cpu", non_blocking=True)  # read it after the next step is queued',
}


def dependency_fix(kind: str = "unknown") -> str:
    """The fix for the kind of wait that costs most (see ``analysis/waits.py``)."""
    return _DEPENDENCY_FIXES.get(
        kind,
        "# queued work waited on a dependency: see the evidence for the stream, the CPU call\n"
        "# and the annotation around the longest waits",
    )


def input_pipeline_fix(gpu: bool = True) -> str:
    """Batches made ahead of the step; pinned only where a GPU copies them (as
    ``data_loader_fix``: without one ``pin_memory=True`` pins nothing and torch warns)."""
    pin = ", pin_memory=True" if gpu else ""
    return (
        "# produce batches ahead of the step: a DataLoader with workers over your dataset,\n"
        f"loader = DataLoader(dataset, batch_size=bs, num_workers=4{pin})\n"
        "# or a background thread filling a queue.Queue(maxsize=2) from your generator"
    )


# -- run-level findings ------------------------------------------------------------------------
def pin_memory_fix(loader: LoaderConfig) -> str:
    """Only pin_memory is missing: the user's call with it added."""
    from torchdoctor.rules.user_fixes import rebuilt_loader_call

    call = rebuilt_loader_call(loader, {"pin_memory": "True"})
    return f"{call}\n# then batch.to(device, non_blocking=True)"


def torch_warning_fix(loader: LoaderConfig, text: str) -> str | None:
    """The user's DataLoader call changed as torch's warning asks; None for a warning we do not
    know how to fix."""
    import re

    from torchdoctor.rules.user_fixes import rebuilt_loader_call

    if "worker processes in total" in text:
        m = re.search(r"suggested max number of worker in current system is (\d+)", text)
        workers = m.group(1) if m else str(max(1, loader.cpus))
        call = rebuilt_loader_call(loader, {"num_workers": workers})
        return f"{call}\n# more worker processes than cores compete with the training process"
    if "'pin_memory' argument is set as true but no accelerator" in text:
        call = rebuilt_loader_call(loader, {"pin_memory": None})
        return f"{call}\n# without pin_memory: nothing to pin for without an accelerator"
    return None


def recompile_fix(reasons: list[str], events: list[dict[str, Any]] | None = None) -> str:
    """mark_dynamic on the tensor and dimension the guards name; otherwise keep the guarded
    values constant."""
    if events:
        from torchdoctor.rules.user_fixes import recompile_user_fix

        return recompile_user_fix(events, recompile_fix(reasons))
    if any("size mismatch" in r or "stride mismatch" in r for r in reasons):
        return (
            "torch._dynamo.mark_dynamic(x, 0)  # before the first call, each varying dimension\n"
            "# or: model = torch.compile(model, dynamic=True)\n"
            "# or pad/bucket inputs to a few fixed sizes"
        )
    return (
        "# keep the guarded values constant across steps (see the reasons), or move them out\n"
        "# of the compiled function"
    )


RECOMPILE_LIMIT = (
    "torch._dynamo.mark_dynamic(x, 0)  # or torch.compile(..., dynamic=True)\n"
    "# to fail loudly instead: torch._dynamo.config.fail_on_recompile_limit_hit = True"
)


COMPILE_NOT_REPAID = (
    "# run eager for short jobs, or reuse compiled artifacts across runs:\n"
    "export TORCHINDUCTOR_CACHE_DIR=/persistent/cache  # warm cache: seconds, not minutes"
)
UNPINNED = (
    "DataLoader(dataset, ..., pin_memory=True)  # or x = x.pin_memory() once for reused tensors"
)
HOST_SYNCS = (
    "# keep values on the device and read them every N steps:\n"
    "running += loss.detach()  # no .item() in the loop\n"
    "if step % 100 == 0: print((running / 100).item()); running.zero_()"
)
FP16_SCALER = (
    "scaler = torch.amp.GradScaler('cuda')\n"
    "scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()\n"
    "# or use dtype=torch.bfloat16 (no scaler needed) on sm80+"
)
BF16_SCALER = "loss.backward(); optimizer.step()  # drop the GradScaler with bfloat16"
TF32 = "torch.backends.cuda.matmul.allow_tf32 = True\ntorch.backends.cudnn.allow_tf32 = True"
FRAGMENTATION = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py"
OOM = (
    "# a smaller batch (with gradient accumulation), torch.autocast(dtype=torch.bfloat16),\n"
    "# activation checkpointing (torch.utils.checkpoint); if much is reserved but unused:\n"
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py"
)


def host_bound_fix(for_loop_optimizers: Sequence[Optimizer] | None = None) -> str:
    """Without optimizers: the GPU fix (compile + CUDA graphs). With the run's for-loop
    optimizers (a CPU run): compile, plus the faster implementation each optimizer really has
    (``fused`` or ``foreach``, see ``rules/optimizer_fixes.py``)."""
    if for_loop_optimizers is None:
        return HOST_BOUND
    from torchdoctor.rules.optimizer_fixes import optimizer_line

    lines = ["model = torch.compile(model)  # fuses chains of small ops into a few kernels"]
    lines += [line for line in map(optimizer_line, for_loop_optimizers[:2]) if line]
    return "\n".join(lines)


ACTIVATION_RECOMPUTE = (
    "# checkpoint fewer blocks (e.g. every other layer) while memory allows, or save the\n"
    "# matmul outputs and recompute only the cheap ops (selective checkpointing):\n"
    "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False,\n"
    "    context_fn=functools.partial(create_selective_checkpoint_contexts, policy))"
)


# -- FSDP --------------------------------------------------------------------------------------
def fsdp_prefetch_fix(cpu: bool = False) -> str:
    """Explicit forward/backward prefetch between FSDP2 blocks, or keep the last block gathered."""
    head = (
        "# gloo runs collectives on the CPU and cannot hide them; on GPUs use NCCL, then:\n"
        if cpu
        else ""
    )
    return head + (
        "blocks = list(model.layers)  # the modules passed to fully_shard, in forward order\n"
        "for b, nxt in zip(blocks, blocks[1:]):\n"
        "    b.set_modules_to_forward_prefetch([nxt])  # gather the next block during this one\n"
        "for b, prev in zip(blocks[::-1], blocks[::-1][1:]):\n"
        "    b.set_modules_to_backward_prefetch([prev])\n"
        "# backward starts with the last block: keep it gathered after forward\n"
        "blocks[-1].set_reshard_after_forward(False)"
    )


def fsdp_reduce_fix(cpu: bool = False) -> str:
    """Shard per block so reduce-scatter overlaps backward; skip it on inner micro-batches."""
    head = (
        "# gloo blocks the training thread in every collective; on GPUs use NCCL\n" if cpu else ""
    )
    return head + (
        "# one fully_shard per block lets each block's reduce-scatter overlap the next backward\n"
        "for block in model.layers:\n"
        "    fully_shard(block)\n"
        "fully_shard(model)\n"
        "# with gradient accumulation, reduce only on the last micro-batch\n"
        "model.set_requires_gradient_sync(is_last_microbatch)"
    )


def memory_growth_fix(sites: list[tuple[str, str]] | None = None) -> str:
    """What keeps each step's tensors alive into the next, as comments (the names are the
    user's); ``sites``: (``file:line``, what the line does) found in the script."""
    found = [f"# {site}: {what}" for site, what in sites or []]
    return "\n".join(
        [
            *found,
            "# memory kept from one step to the next; what usually holds each step's graph:",
            "# - loss.backward(retain_graph=True): call loss.backward() unless a second backward "
            "runs through the same graph",
            "# - a loss summed as a tensor (total = total + loss): sum loss.item(), or "
            "loss.detach()",
            "# - outputs kept in a list with their graph (for logging or metrics): append "
            "out.detach() (or .item(), .cpu())",
        ]
    )
