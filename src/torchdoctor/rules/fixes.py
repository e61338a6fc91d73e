"""The fix (code to paste), documentation link and one-line explanation for each trace finding."""

from __future__ import annotations

DOCS = "https://pytorch.org/docs/stable"

FIXES: dict[str, tuple[str, str, str]] = {
    "data-loading-bound": (
        "loader = DataLoader(dataset, batch_size=bs, num_workers=min(8, os.cpu_count()),\n"
        "                    pin_memory=True, persistent_workers=True, prefetch_factor=4)",
        f"{DOCS}/data.html#multi-process-data-loading",
        "Batches are produced in the training process, so the device waits for every one; "
        "worker processes prepare them ahead while the GPU computes.",
    ),
    "host-bound": (
        'model = torch.compile(model, mode="reduce-overhead")  # fuses ops, replays CUDA graphs\n'
        "# or capture the step with torch.cuda.graphs; a larger batch also amortises launches",
        f"{DOCS}/generated/torch.compile.html",
        "Each op pays Python, dispatcher and launch cost before the GPU sees it; when kernels are "
        "shorter than that cost the GPU runs dry. Fusion and CUDA graphs cut the launches.",
    ),
    "sync-stalls": (
        'torch.cuda.set_sync_debug_mode("warn")  # prints every synchronising call site\n'
        "# then keep values on the device: log loss.detach() and call .item() every N steps",
        f"{DOCS}/generated/torch.cuda.set_sync_debug_mode.html",
        "A synchronising call (.item(), .cpu(), torch.cuda.synchronize, a blocking copy) makes the "
        "CPU wait until the GPU finishes, so nothing is queued when it does.",
    ),
    "pageable-h2d-copies": (
        "loader = DataLoader(dataset, ..., pin_memory=True)\n"
        "x = x.to(device, non_blocking=True)  # asynchronous only from pinned memory",
        f"{DOCS}/notes/cuda.html#use-pinned-memory-buffers",
        "Copies from pageable memory go through a staging buffer at lower bandwidth and block the "
        "CPU; pinned memory copies at full speed and overlaps with compute.",
    ),
    "synchronous-copies": (
        "x = x.pin_memory().to(device, non_blocking=True)  # host to device, asynchronous\n"
        'out = y.to("cpu", non_blocking=True); torch.cuda.current_stream().synchronize()  # once',
        f"{DOCS}/notes/cuda.html#use-pinned-memory-buffers",
        "A blocking copy waits for all queued work and stops the CPU from running ahead.",
    ),
    "fp32-gemm-no-tensor-cores": (
        'with torch.autocast(device_type="cuda", dtype=torch.bfloat16):  # fp16 + GradScaler '
        "before Ampere\n    loss = model(x)\n"
        "torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True",
        f"{DOCS}/amp.html",
        "fp32 matrix multiplies run on the SIMT cores; in bf16/fp16 (or TF32) they run on the "
        "tensor cores at several times the throughput.",
    ),
    "exposed-communication": (
        "model = DDP(model, device_ids=[local_rank], bucket_cap_mb=25,\n"
        "            gradient_as_bucket_view=True, static_graph=True)\n"
        "# with accumulation: with model.no_sync(): ... on the inner micro-batches",
        f"{DOCS}/notes/ddp.html",
        "DDP overlaps each gradient bucket's all-reduce with the rest of backward; exposed time "
        "means buckets finish late (too large, a sync in backward, or no compute left to hide "
        "behind).",
    ),
    "low-gpu-utilization": (
        "# raise the work per launch: a larger batch, torch.compile to fuse small kernels,\n"
        '# and CUDA graphs (mode="reduce-overhead") for the remaining gaps',
        f"{DOCS}/generated/torch.compile.html",
        "The GPU is idle for much of the step even after the named causes; small kernels with gaps "
        "between them leave the device waiting.",
    ),
    "data-parallel": (
        "torchrun --nproc_per_node=NUM_GPUS train.py  # one process per GPU\n"
        "model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])",
        f"{DOCS}/notes/ddp.html",
        "nn.DataParallel replicates the model and scatters inputs from one Python thread every "
        "step; DDP runs one process per GPU and overlaps gradient all-reduce with backward.",
    ),
    "memory-pressure": (
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py\n"
        "# and/or activation checkpointing, a smaller micro-batch with gradient accumulation",
        f"{DOCS}/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf",
        "Peak memory is close to the device's capacity: one larger batch or a fragmented pool "
        "fails with out-of-memory.",
    ),
    "straggler-rank": (
        "# compare the slow rank's breakdown: torchdoctor analyze RUN_DIR/rank<N>.json.gz\n"
        "# typical causes: uneven data shards, a slower host or GPU, extra work on one rank",
        f"{DOCS}/notes/ddp.html",
        "Collectives wait for the slowest rank, so every rank runs at its speed.",
    ),
}


RUN_DOCS: dict[str, str] = {
    "recompiles": f"{DOCS}/torch.compiler_troubleshooting.html",
    "recompile-limit-hit": f"{DOCS}/torch.compiler_troubleshooting.html",
    "graph-breaks": f"{DOCS}/torch.compiler_troubleshooting.html",
    "compile-not-repaid": f"{DOCS}/generated/torch.compile.html",
    "dataloader-config": f"{DOCS}/data.html#multi-process-data-loading",
    "data-loading-bound": f"{DOCS}/data.html#multi-process-data-loading",
    "unpinned-non-blocking": f"{DOCS}/notes/cuda.html#use-pinned-memory-buffers",
    "fp16-without-grad-scaler": f"{DOCS}/notes/amp_examples.html",
    "grad-scaler-with-bf16": f"{DOCS}/notes/amp_examples.html",
    "fp32-on-bf16-gpu": f"{DOCS}/amp.html",
    "tf32-off": f"{DOCS}/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices",
    "host-syncs-in-step": f"{DOCS}/generated/torch.cuda.set_sync_debug_mode.html",
    "memory-fragmentation": f"{DOCS}/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf",
    "out-of-memory": f"{DOCS}/torch_cuda_memory.html",
    "host-bound": f"{DOCS}/generated/torch.compile.html",
    "data-parallel": f"{DOCS}/notes/ddp.html",
}
"""Documentation for run-level findings (torchdoctor check), by finding id."""
