"""Run-level rules: findings from what ``torchdoctor check`` collected beside the trace.

Each rule takes the ``run.json`` record (plain data, so rules are tested on hand-written
records and never import torch) and returns findings whose savings are capped at the step.
Thresholds and estimates are documented in docs/check.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchdoctor.rules.compile_rules import (
    compile_not_repaid,
    graph_breaks,
    recompile_limit,
    recompiles,
)
from torchdoctor.rules.finding import Finding, rank_findings
from torchdoctor.rules.run_common import (
    DATA_PARALLEL_SHARE,
    DATA_WAIT_SHARE,
    GEMM_SPEEDUP_SAVING,
    PAGEABLE_GBPS,
    TINY_OP_SAVING,
    TINY_OPS_PER_STEP,
    make,
    measured_steps,
    run_step_ms,
)


def dataloader_config(run: dict[str, Any]) -> list[Finding]:
    """DataLoader settings when batches keep the step waiting; saving (ms/step): the data wait."""
    cfg, steps = run.get("config") or {}, run.get("steps") or {}
    loaders = [d for d in cfg.get("dataloaders") or [] if "num_workers" in d]
    step, wait = run_step_ms(run), float(steps.get("mean_data_wait_ms") or 0.0)
    if not loaders or not step:
        return []
    dl = loaders[0]
    cpus = int(dl.get("cpus_per_rank") or dl.get("cpu_count") or 2)
    workers = max(2, min(8, cpus))
    cuda = bool(run.get("gpu"))
    if wait / step < DATA_WAIT_SHARE:
        if cuda and not dl["pin_memory"]:
            return [_pin_memory_only(run, dl)]
        return []
    fix = (
        f"DataLoader(dataset, batch_size={dl['batch_size']}, num_workers={workers}, "
        f"persistent_workers=True, prefetch_factor=4{', pin_memory=True' if cuda else ''})"
    )
    if dl["num_workers"] == 0:
        why = "num_workers=0 loads every batch in the training process, between steps."
    else:
        why = (
            f"{dl['num_workers']} workers cannot keep up: add workers (up to the CPU count) or "
            "make __getitem__ cheaper (decode/augment on the GPU, pre-process once)."
        )
    return [
        make(
            run,
            "dataloader-config",
            f"the step waits {wait:.1f} ms ({wait / step:.0%}) for each batch "
            f"(num_workers={dl['num_workers']})",
            wait,
            {"data_wait_ms_per_step": wait, "dataloader": dl, "suggested_num_workers": workers},
            fix,
            why + " Worker processes prepare the next batches while the model trains.",
        )
    ]


def _pin_memory_only(run: dict[str, Any], dl: dict[str, Any]) -> Finding:
    return make(
        run,
        "dataloader-config",
        "DataLoader without pin_memory on a CUDA run: host-to-device copies cannot overlap",
        0.0,
        {"dataloader": dl},
        "DataLoader(..., pin_memory=True)  # then batch.to(device, non_blocking=True)",
        "Copies from pageable memory are staged and synchronous; pinned batches copy "
        "asynchronously while the previous step computes.",
    )


def unpinned_non_blocking(run: dict[str, Any]) -> list[Finding]:
    """non_blocking copies from pageable memory; saving (ms/step): bytes at PAGEABLE_GBPS."""
    rows = (run.get("syncs") or {}).get("unpinned_non_blocking") or []
    if not rows:
        return []
    measured = max(1, measured_steps(run))
    copies = sum(r["copies"] for r in rows) / measured
    nbytes = sum(r["bytes"] for r in rows) / measured
    saving = nbytes / (PAGEABLE_GBPS * 1e9) * 1e3
    return [
        make(
            run,
            "unpinned-non-blocking",
            f"{copies:.1f} non_blocking copies per step from unpinned memory "
            f"({nbytes / 2**20:.1f} MiB): they run synchronously",
            saving,
            {"copies_per_step": copies, "bytes_per_step": nbytes, "sites": rows[:8]},
            "DataLoader(..., pin_memory=True)  # or x = x.pin_memory() once for reused tensors",
            "non_blocking=True only overlaps a host-to-device copy when the source is pinned; "
            "from pageable memory the copy is staged and blocks the host.",
            [r["site"] for r in rows[:8]],
        )
    ]


def host_syncs(run: dict[str, Any]) -> list[Finding]:
    """Per-step host syncs at user lines; saving (ms/step): time blocked inside them."""
    s = run.get("syncs") or {}
    rows, debug = s.get("host_syncs") or [], s.get("sync_debug") or []
    measured = measured_steps(run)
    if not measured or not (rows or debug):
        return []
    per_step = [r for r in rows if r["calls"] / measured >= 0.5]
    if not per_step and not debug:
        return []
    calls = sum(r["calls"] for r in per_step) / measured
    blocked_ms = sum(r["seconds"] for r in per_step) * 1e3 / measured
    on_device = any(r["device"] != "cpu" for r in per_step) or bool(debug)
    kinds = sorted({r["kind"] for r in per_step})
    note = "" if on_device else " (CPU tensors here: free now, a full sync on a GPU)"
    return [
        make(
            run,
            "host-syncs-in-step",
            f"{calls:.1f} host syncs per step ({', '.join(kinds) or 'sync'}){note}",
            blocked_ms,
            {
                "syncs_per_step": calls,
                "blocked_ms_per_step": blocked_ms,
                "sites": per_step[:8],
                "sync_debug_sites": debug[:8],
            },
            "Keep values on the device and read them every N steps:\n"
            "running += loss.detach()  # no .item() in the loop\n"
            "if step % 100 == 0: print((running / 100).item()); running.zero_()",
            "Reading a device value on the host waits for every queued kernel, so the CPU stops "
            "queueing work and the GPU idles at the start of the next step.",
            [r["site"] for r in per_step[:8]] + [d["site"] for d in debug[:4]],
            severity=None if on_device else "info",
        )
    ]


# -- precision ----------------------------------------------------------------------------------
def _autocast_dtypes(run: dict[str, Any]) -> set[str]:
    entries = (run.get("config") or {}).get("autocast") or []
    return {e["dtype"] for e in entries if e.get("enabled")}


def amp_rules(run: dict[str, Any]) -> list[Finding]:
    """fp16 autocast without GradScaler, GradScaler with bf16 (correctness: 0 ms saving)."""
    cfg = run.get("config") or {}
    dtypes = _autocast_dtypes(run)
    scaler = any(s.get("enabled") for s in cfg.get("grad_scalers") or [])
    training = bool((run.get("config") or {}).get("optimizer_steps"))
    out = []
    if "float16" in dtypes and not scaler and training:
        out.append(
            make(
                run,
                "fp16-without-grad-scaler",
                "fp16 autocast without a GradScaler: small gradients underflow to zero",
                0.0,
                {"autocast_dtypes": sorted(dtypes), "grad_scalers": cfg.get("grad_scalers")},
                "scaler = torch.amp.GradScaler('cuda')\n"
                "scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()\n"
                "# or use dtype=torch.bfloat16 (no scaler needed) on sm80+",
                "fp16 represents nothing below ~6e-8; unscaled gradients silently become zero.",
                severity="warning",
            )
        )
    if scaler and "bfloat16" in dtypes and "float16" not in dtypes:
        out.append(
            make(
                run,
                "grad-scaler-with-bf16",
                "GradScaler with bf16 autocast: not needed, and it syncs every step",
                0.0,
                {"autocast_dtypes": sorted(dtypes), "grad_scalers": cfg.get("grad_scalers")},
                "loss.backward(); optimizer.step()  # drop the GradScaler with bfloat16",
                "bf16 has fp32's exponent range, so gradients do not underflow; the scaler's "
                "inf check reads a value on the host every step.",
            )
        )
    return out


def precision_rules(run: dict[str, Any]) -> list[Finding]:
    """fp32 GEMMs on an sm80+ GPU, TF32 off; saving (ms/step): half the GEMM time."""
    dev = (run.get("gpu") or {}).get("device") or {}
    ops = run.get("ops") or {}
    gemm = float(ops.get("gemm_share") or 0.0) if ops.get("gemm_share_basis") == "device" else 0.0
    if not dev.get("bf16_tensor_cores") or _autocast_dtypes(run) or gemm < 0.2:
        return []
    step = run_step_ms(run) or 0.0
    flags = (run.get("config") or {}).get("backend_flags") or {}
    saving = gemm * step * GEMM_SPEEDUP_SAVING
    ev = {"gemm_share_of_gpu_time": gemm, "device": dev, "backend_flags": flags}
    out = [
        make(
            run,
            "fp32-on-bf16-gpu",
            f"fp32 training on {dev.get('name')} (bf16 tensor cores): GEMMs are {gemm:.0%} of GPU time",
            saving,
            ev,
            "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = model(x)",
            "bf16 matmuls run on tensor cores at several times the fp32 rate, with fp32 range.",
        )
    ]
    if not flags.get("tf32_matmul"):
        out.append(
            make(
                run,
                "tf32-off",
                "TF32 is off: fp32 matmuls skip the tensor cores",
                saving,
                ev,
                "torch.backends.cuda.matmul.allow_tf32 = True\n"
                "torch.backends.cudnn.allow_tf32 = True",
                "TF32 keeps fp32 storage and range and runs matmuls on tensor cores.",
            )
        )
    return out


# -- parallelism, memory, overhead --------------------------------------------------------------
def data_parallel(run: dict[str, Any]) -> list[Finding]:
    """nn.DataParallel in use; saving (ms/step): DATA_PARALLEL_SHARE of the step."""
    dp = (run.get("config") or {}).get("data_parallel") or []
    if not dp:
        return []
    return [
        make(
            run,
            "data-parallel",
            "nn.DataParallel in use: one process drives every GPU",
            (run_step_ms(run) or 0.0) * DATA_PARALLEL_SHARE,
            {"data_parallel": dp},
            "torchrun --nproc_per_node=NGPU train.py  # with\n"
            "model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])",
            "DataParallel scatters inputs, re-replicates the model every step and gathers "
            "outputs on GPU 0, with one Python thread per GPU contending for the GIL.",
            floor="warning",
        )
    ]


def memory_rules(run: dict[str, Any]) -> list[Finding]:
    """Allocator fragmentation (retries, reserved far above allocated); saving not measured."""
    mem = (run.get("gpu") or {}).get("memory") or {}
    if not mem.get("peak_reserved_bytes"):
        return []
    slack = mem["peak_reserved_bytes"] - mem["peak_allocated_bytes"]
    retries = mem.get("alloc_retries", 0)
    if not (retries or (mem["fragmentation"] >= 0.3 and slack >= 2**30)):
        return []
    tight = mem["peak_reserved_bytes"] >= 0.9 * mem.get("total_bytes", float("inf"))
    return [
        make(
            run,
            "memory-fragmentation",
            f"reserved memory {slack / 2**30:.1f} GiB above allocated at the peak "
            f"({mem['fragmentation']:.0%}), {retries} allocator retries",
            0.0,
            {"memory": mem},
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py",
            "The caching allocator holds blocks it cannot reuse for differently sized tensors; "
            "retries free the cache and synchronise. Expandable segments grow in place instead.",
            severity="warning" if retries or tight else "info",
        )
    ]


def out_of_memory(run: dict[str, Any]) -> list[Finding]:
    """Out-of-memory: what filled the memory (model state vs activations vs unused cache)."""
    oom = run.get("oom")
    if not oom:
        return []
    gib = 2**30
    opts = (run.get("config") or {}).get("optimizers") or []
    params = sum(o.get("param_bytes", 0) for o in opts)
    adam = any("Adam" in o.get("class", "") for o in opts)
    model_state = params * (4 if adam else 2)  # weights + grads (+ 2 Adam moments)
    held = oom.get("allocated_bytes") or (oom.get("memory") or {}).get("peak_allocated_bytes", 0)
    rest = max(0, held - model_state)
    parts = [f"tried to allocate {oom.get('tried_bytes', 0) / gib:.2f} GiB"]
    if params:
        parts.append(f"weights+grads{'+Adam state' if adam else ''} ~{model_state / gib:.2f} GiB")
    if held:
        parts.append(f"activations and temporaries ~{rest / gib:.2f} GiB")
    if oom.get("reserved_unallocated_bytes"):
        parts.append(f"{oom['reserved_unallocated_bytes'] / gib:.2f} GiB reserved but unused")
    return [
        make(
            run,
            "out-of-memory",
            "out of memory: " + "; ".join(parts),
            run_step_ms(run) or 0.0,
            {"oom": oom, "model_state_bytes": model_state},
            "Smaller batch (with gradient accumulation), torch.autocast(dtype=torch.bfloat16), "
            "activation checkpointing (torch.utils.checkpoint); if much is reserved but unused: "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            "What filled the memory: " + "; ".join(parts) + ". See memory_summary.txt and "
            "memory_snapshot.pickle (https://pytorch.org/memory_viz).",
            [b["where"] for b in oom.get("largest_blocks", []) if b.get("where")],
            severity="critical",
        )
    ]


def tiny_ops(run: dict[str, Any]) -> list[Finding]:
    """CPU steps made of hundreds of tiny ops; saving (ms/step): TINY_OP_SAVING of their overhead."""
    ops, step = run.get("ops") or {}, run_step_ms(run)
    if ops.get("gemm_share_basis") != "cpu" or not step:
        return []
    n, tiny = float(ops.get("top_level_ops_per_step") or 0), float(ops["tiny_op_time_ms_per_step"])
    # Python time between ops: the step minus op time, batch waits and compile pauses.
    steps, c = run.get("steps") or {}, run.get("compile") or {}
    paused_ms = float(steps.get("mean_data_wait_ms") or 0.0) + float(
        c.get("recompile_s_in_window") or 0.0
    ) * 1e3 / max(1, measured_steps(run))
    python_ms = max(0.0, step - float(ops["op_time_ms_per_step"]) - paused_ms)
    if n < TINY_OPS_PER_STEP or ops["median_op_us"] >= ops["tiny_op_threshold_us"]:
        return []
    optim = [
        o for o in (run.get("config") or {}).get("optimizers") or [] if o["impl"] == "for-loop"
    ]
    fix = "model = torch.compile(model)  # fuses chains of small ops into a few kernels"
    if optim:
        fix += (
            f"\n{optim[0]['class']}(params, ..., fused=True)  # one kernel, not a loop per tensor"
        )
    return [
        make(
            run,
            "host-bound",
            f"{n:.0f} operators per step, median {ops['median_op_us']:.1f} us: framework "
            "overhead, not compute, sets the step time",
            TINY_OP_SAVING * (tiny + python_ms),
            {**ops, "python_between_ops_ms_per_step": python_ms, "for_loop_optimizers": optim},
            fix,
            "Each operator pays Python, dispatcher (and on a GPU, launch) overhead of several "
            "microseconds; hundreds of tiny ones per step cost more than their arithmetic.",
        )
    ]


RULES: tuple[Callable[[dict[str, Any]], list[Finding]], ...] = (
    recompiles,
    recompile_limit,
    graph_breaks,
    compile_not_repaid,
    dataloader_config,
    unpinned_non_blocking,
    host_syncs,
    amp_rules,
    precision_rules,
    data_parallel,
    memory_rules,
    out_of_memory,
    tiny_ops,
)


def run_findings(run: dict[str, Any]) -> list[Finding]:
    """Every run-level finding for one rank's record, most valuable first."""
    found: list[Finding] = []
    for rule in RULES:
        found.extend(rule(run))
    return rank_findings(found)
