"""GPU check, runtime sections, one process: each collects evidence on the GPU and is judged by
``gpu_check_judge`` (verdicts under ``WORK/verdicts``).

    python scripts/gpu_check_runtime.py WORK [--only meter,prefetch] [--steps 30]

precision       what ``precision="auto"`` chose on this GPU, and its peak-table entry.
meter           MFU of a small GPT (bf16 autocast): FlopCounterMode's FLOPs against the analytic
                6·N·T + attention count, the device's dense peak from the table, 0 < MFU < 1; and
                the meter's CUDA-event step time against synchronised host timing.
prefetch        side-stream prefetch: batches equal synchronous copies; from a profiled run,
                copies and kernels on separate streams and the copy time hidden under kernels
                over min(copy, compute); the speed-up against the ideal one, the serial step over
                the longer of the copy (back to back on a side stream) and the compute (input
                already on the device), each measured alone: at least half of it, never above it;
                each step credited with its own batch.
fp16            fp16-mixed with the GradScaler forced: one overflowing step skipped, counted once.
memory-history  Runtime(memory_history=...) under caught OOMs: every OOM observed, snapshots
                capped, nothing analysed inside the allocator, the observer's third argument the
                device limit, quiet after ``close()``.
tune-loop       the tuner's real loop step (through the runtime), gradient accumulation 4, run under
                ``torch.cuda.set_sync_debug_mode("error")``: no host sync per micro-batch.

Exit 0 when every section run passed, 1 otherwise (also without CUDA: each verdict says so).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check_judge as judge

SECTIONS = ("precision", "meter", "prefetch", "fp16", "memory-history", "tune-loop")


# -- trace arithmetic (no torch) ---------------------------------------------------------------
def _intervals(events: list[dict[str, Any]], cat: str) -> list[tuple[float, float, int]]:
    return [
        (
            float(e["ts"]),
            float(e["ts"]) + float(e.get("dur", 0)),
            int(e.get("args", {}).get("stream", -1)),
        )
        for e in events
        if e.get("ph") == "X" and e.get("cat") == cat
    ]


def _union_length(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def overlap_from_trace(trace: dict[str, Any]) -> dict[str, Any]:
    """Copy time (host-to-device memcpy), compute time (kernels on streams that carry no copy),
    and the copy time that ran while a kernel ran on another stream, in microseconds."""
    events = trace.get("traceEvents", [])
    copies = _intervals(events, "gpu_memcpy")
    kernels = sorted(_intervals(events, "kernel"))
    copy_streams = {s for _, _, s in copies}
    overlapped = 0.0
    for a, b, stream in copies:
        covered = [
            (max(a, ka), min(b, kb)) for ka, kb, ks in kernels if ks != stream and ka < b and kb > a
        ]
        overlapped += _union_length(covered)
    compute = [(a, b) for a, b, s in kernels if s not in copy_streams]
    copy_us = sum(b - a for a, b, _ in copies)
    return {
        "copy_events": len(copies),
        "copy_streams": sorted(copy_streams),
        "kernel_streams": sorted({s for _, _, s in kernels}),
        "compute_streams": sorted({s for _, _, s in kernels if s not in copy_streams}),
        "copy_us": copy_us,
        "compute_us": _union_length(compute),
        "copy_overlapped_with_kernels_us": overlapped,
        "overlap_share": overlapped / copy_us if copy_us else None,
    }


# -- precision and meter ----------------------------------------------------------------------
def check_precision() -> dict[str, Any]:
    import torch

    import torchdoctor as td
    from torchdoctor.hardware import lookup_gpu

    rt = td.Runtime(precision="auto")
    name = torch.cuda.get_device_name(rt.device)
    spec = lookup_gpu(name)
    return {
        "device_name": name,
        "capability": list(torch.cuda.get_device_capability(rt.device)),
        "chosen": rt.precision.precision,
        "reason": rt.precision.reason,
        "tf32": rt.precision.tf32,
        "grad_scaler": rt.scaler is not None,
        "table_entry": None if spec is None else spec.name,
        "peak_flops": None if spec is None else spec.peak(rt.precision.peak_dtype),
    }


def _gpt(vocab: int, dim: int, layers: int, heads: int, seq: int) -> Any:
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, dim // heads).unbind(2)
            y = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, dim))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.head = nn.Linear(dim, vocab, bias=False)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            return self.head(self.blocks(x))

    return GPT()


def check_mfu(
    steps: int,
    compile_mode: str,
    *,
    vocab: int = 32768,
    dim: int = 768,
    layers: int = 6,
    heads: int = 12,
    seq: int = 1024,
    batch: int = 16,
    workers: int = 2,
) -> dict[str, Any]:
    """Train a GPT-style model for ``steps`` steps; the meter's summary next to analytic FLOPs."""
    import torch
    import torch.nn.functional as F

    import torchdoctor as td

    rt = td.Runtime(precision="auto", compile=compile_mode, optimizer_impl="fused")
    torch.manual_seed(0)
    model = _gpt(vocab, dim, layers, heads, seq)
    # Matmul weights only: embedding lookups do no FLOPs.
    n_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    model, opt = rt.setup(model, torch.optim.AdamW(model.parameters(), lr=3e-4))
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, vocab, (batch, seq + 1), generator=g) for _ in range(steps)]
    data = [{"x": i[:, :-1].clone(), "y": i[:, 1:].clone()} for i in ids]
    loader = rt.loader(data, batch_size=None, num_workers=workers)  # items are batches
    for b in loader:
        with rt.autocast():
            logits = model(b["x"])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), b["y"].flatten())
        rt.backward(loss)
        rt.step(opt)
    s = rt.meter.summary()
    # 6 N T for the dense layers plus causal-agnostic attention: 12 L T^2 d per sequence (fwd+bwd).
    tokens = batch * seq
    analytic = 6 * n_params * tokens + 12 * layers * seq * seq * dim * batch
    return {
        "compile": compile_mode,
        "model": {
            "vocab": vocab,
            "dim": dim,
            "layers": layers,
            "heads": heads,
            "seq": seq,
            "batch": batch,
            "params_matmul": n_params,
        },
        "precision": rt.precision.precision,
        "summary": {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.__dict__.items()},
        "analytic_flops_per_step": analytic,
        "measured_over_analytic": None if not s.flops_per_step else s.flops_per_step / analytic,
        "text": str(s),
    }


def _events_vs_host(width: int = 4096, steps: int = 14) -> dict[str, Any]:
    """The meter's CUDA-event median step against host-clock timing of the same synchronised
    steps (fp32 MLP)."""
    import torch

    import torchdoctor as td

    rt = td.Runtime(precision="fp32", device="cuda:0")
    torch.manual_seed(0)
    model = rt.setup(_mlp(width))
    opt = rt.setup_optimizer(torch.optim.SGD(model.parameters(), lr=1e-3))
    x = torch.randn(1024, width, device=rt.device)
    marks = [time.perf_counter()]
    for _ in range(steps):
        rt.backward(model(x).float().square().mean())
        rt.step(opt)
        torch.cuda.synchronize()
        marks.append(time.perf_counter())
    s = rt.meter.summary()
    host = sorted(b - a for a, b in itertools.pairwise(marks[2:]))  # after the warm-up steps
    return {
        "timing": s.timing,
        "events_step_ms": s.step_time_ms,
        "host_step_ms": host[len(host) // 2] * 1e3,
    }


def check_meter(steps: int) -> dict[str, Any]:
    from torchdoctor.hardware import lookup_gpu

    mfu = check_mfu(steps, "off")
    s = mfu["summary"]
    spec = lookup_gpu(s["device_name"])
    return {
        "device_name": s["device_name"],
        "table_entry": None if spec is None else spec.name,
        "peak_dtype": s["peak_dtype"],
        "peak_flops": s["peak_flops"],
        "table_peak_flops": None if spec is None else spec.peak(s["peak_dtype"]),
        "flops_per_step": s["flops_per_step"],
        "analytic_flops_per_step": mfu["analytic_flops_per_step"],
        "mfu": s["mfu"],
        "step_time_ms": s["step_time_ms"],
        "notes": s["notes"],
        "precision": mfu["precision"],
        "model": mfu["model"],
        **_events_vs_host(),
    }


# -- prefetch ----------------------------------------------------------------------------------
def _mlp(width: int = 2048, depth: int = 4) -> Any:
    from torch import nn

    layers: list[Any] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, 1))


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def _calibrate(layer: Any, batch: Any, device: Any) -> tuple[float, int]:
    """(seconds of one pinned host-to-device copy of ``batch``, matmuls per step so that compute
    takes about as long as the copy): balanced work gives the largest possible gain."""
    import torch

    copies, one = [], []
    x = batch.to(device)
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        batch.to(device, non_blocking=True)
        torch.cuda.synchronize()
        copies.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with torch.no_grad():
            torch.tanh(layer(x))
        torch.cuda.synchronize()
        one.append(time.perf_counter() - t0)
    copy_s, matmul_s = _median(copies), _median(one)
    return copy_s, max(1, round(copy_s / matmul_s))


def _alone(layer: Any, batches: list[Any], repeats: int, device: Any) -> tuple[float, float]:
    """(copy seconds per batch, compute seconds per step), each measured alone: the copies back
    to back on a side stream (the copy engine's rate, no per-copy sync), the compute with its
    input already on the device, timed in the loop ``_prefetch_run`` times. A prefetched step
    still runs that compute in that loop and needs one copy: neither figure can be beaten."""
    import torch

    x = batches[0].to(device)
    compute = []
    for _ in range(7):
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(repeats):
                y = torch.tanh(layer(x))
        del y
        torch.cuda.synchronize()
        compute.append(time.perf_counter() - t0)
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.cuda.stream(stream):
        for b in batches:
            b.to(device, non_blocking=True)
    stream.synchronize()
    return (time.perf_counter() - t0) / len(batches), _median(compute)


def _prefetch_run(
    depth: int, batches: list[Any], layer: Any, repeats: int, trace: Path | None
) -> tuple[float, list[int]]:
    """(median step seconds, samples the meter credited to each step) with
    ``device_prefetch=depth``."""
    import torch

    import torchdoctor as td

    rt = td.Runtime(precision="fp32", device_prefetch=depth)
    prof = None
    if trace is not None:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    times: list[float] = []
    torch.cuda.synchronize()
    for x in rt.prefetcher(batches):
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(repeats):
                y = torch.tanh(layer(x))
        del y
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        rt.meter.step_end()
    if prof is not None:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(str(trace))
    return _median(times), list(rt.meter._samples)  # samples credited to each step


def check_prefetch(steps: int) -> dict[str, Any]:
    import json

    import torch

    from torchdoctor.runtime.data import DevicePrefetcher
    from torchdoctor.runtime.transfer import map_tensors

    device = torch.device("cuda", torch.cuda.current_device())
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 matmuls, as the runtime's fp32 sets them
    host = [{"x": torch.randn(256, 256), "y": (torch.arange(i, i + 8),)} for i in range(10)]
    pinned = [map_tensors(b, lambda t: t.pin_memory()) for b in host]
    got = list(DevicePrefetcher(pinned, device, depth=3))
    equal = all(
        torch.equal(g["x"].cpu(), h["x"]) and torch.equal(g["y"][0].cpu(), h["y"][0])
        for g, h in zip(got, host, strict=True)
    )
    torch.manual_seed(0)
    layer = torch.nn.Linear(4096, 4096).to(device)
    # 64 MiB per batch from pinned memory; the matmul count per step balances copy and compute.
    batches = [torch.randn(4096, 4096).pin_memory() for _ in range(steps)]
    _, repeats = _calibrate(layer, batches[0], device)
    with tempfile.TemporaryDirectory() as tmp:
        trace_path = Path(tmp) / "prefetch.json"
        _prefetch_run(2, batches[:6], layer, repeats, trace_path)  # a short profiled window
        overlap = overlap_from_trace(json.loads(trace_path.read_text()))
    serial_s, _ = _prefetch_run(0, batches, layer, repeats, None)
    ahead_s, counted = _prefetch_run(2, batches, layer, repeats, None)
    # The ideal from measured parts (it was the calibration copy, sync included, and the serial
    # step less it: 1.24x against a measured 1.36x on an H200).
    copy_s, compute_s = _alone(layer, batches, repeats, device)
    return {
        "equal_to_synchronous_copies": equal,
        "trace": overlap,
        "matmuls_per_step": repeats,
        "copy_ms_alone": copy_s * 1e3,
        "compute_ms_alone": compute_s * 1e3,
        "step_ms_prefetch_0": serial_s * 1e3,
        "step_ms_prefetch_2": ahead_s * 1e3,
        "samples_per_step": counted,
        "batch_samples": 4096,
    }


# -- fp16, memory history, tune loop -----------------------------------------------------------
def check_fp16(device: str | None = None, width: int = 2048) -> dict[str, Any]:
    """fp16-mixed with the GradScaler forced: step 5's loss is made infinite."""
    import torch

    import torchdoctor as td

    rt = td.Runtime(precision="fp16-mixed", device=device)
    scale0 = rt.scaler.get_scale()
    torch.manual_seed(0)
    model = _mlp(width)
    model, opt = rt.setup(model, torch.optim.SGD(model.parameters(), lr=1e-3))
    x = torch.randn(1024, width, device=rt.device)
    for step in range(12):
        with rt.autocast():
            loss = model(x).float().square().mean()
        if step == 5:
            loss = loss * float("inf")  # an overflow the scaler must skip
        rt.backward(loss)
        rt.step(opt)
    s = rt.meter.summary()
    return {
        "precision": rt.precision.precision,
        "grad_scaler": rt.scaler is not None,
        "skipped_steps": s.skipped_steps,
        "scale_before_after": [scale0, rt.scaler.get_scale()],
        "timing": s.timing,
    }


def check_memory_history(work: Path, caught: int = 5) -> dict[str, Any]:
    import torch

    import torchdoctor as td

    folder = work / "memory-history"
    rt = td.Runtime(precision="fp32", memory_history=folder)
    history = rt.memory_history
    assert history is not None and history.recording, "memory history did not start"
    total = torch.cuda.get_device_properties(rt.device).total_memory
    held = torch.empty(2**28, dtype=torch.uint8, device=rt.device)  # 256 MiB live at the OOMs
    headline_after_oom = None
    for _ in range(caught):  # a retry loop: each OOM caught, as cuDNN or a batch finder does
        with contextlib.suppress(torch.cuda.OutOfMemoryError):
            torch.empty(2 * total, dtype=torch.uint8, device=rt.device)
        if headline_after_oom is None:
            headline_after_oom = history.headline is not None
    report = history.report()
    observed = history.observed_ooms
    snapshot = history.snapshot_path
    rt.close()
    with contextlib.suppress(torch.cuda.OutOfMemoryError):  # after close: must go unseen
        torch.empty(2 * total, dtype=torch.uint8, device=rt.device)
    del held
    return {
        "caught_ooms": caught,
        "observed_ooms": observed,
        "observed_after_stop": history.observed_ooms,
        "dumps": history.dumps,
        "max_dumps": history.max_dumps,
        "ooms": history.ooms[:2],
        "total_memory_bytes": total,
        "headline_after_oom": headline_after_oom,
        "headline_after_report": None if report is None else report.get("text"),
        "snapshot_bytes": snapshot.stat().st_size if snapshot and snapshot.exists() else 0,
    }


def _tune_workload() -> Any:
    import torch

    from torchdoctor.tune.workload import Workload

    torch.manual_seed(0)
    model = _mlp(1024, 2)
    x = torch.randn(4096, 1024)
    return Workload(
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
        dataset=torch.utils.data.TensorDataset(x, x[:, :1].sin()),
        loss=lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1]),
        batch_size=256,
    )


def check_tune_loop(steps: int = 3) -> dict[str, Any]:
    import torch

    from torchdoctor.config import RuntimeConfig
    from torchdoctor.tune.worker import _Loop

    out: dict[str, Any] = {"backends": {}}
    for backend in ("runtime",):  # a trial has one path: torchdoctor.Runtime
        # Pinned batches copied without blocking: the data path itself must not sync either.
        config = RuntimeConfig(
            grad_accumulation=4, num_workers=0, pin_memory=True, device_prefetch=2
        )
        loop = _Loop(config, _tune_workload())
        loop.step()  # first-call set-up (cuBLAS handles, the pinned pool) outside the check
        torch.cuda.synchronize()
        entry: dict[str, Any] = {"backend": loop.backend.name, "steps": 0, "error": None}
        torch.cuda.set_sync_debug_mode("error")
        out["sync_debug_mode"] = torch.cuda.get_sync_debug_mode()
        try:
            for _ in range(steps):
                loop.step()
                entry["steps"] += 1
        except RuntimeError as exc:
            entry["error"] = str(exc).splitlines()[0][:300]
        finally:
            torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()
        out["backends"][backend] = entry
    return out


def _collectors(work: Path, steps: int) -> dict[str, Callable[[], dict[str, Any]]]:
    return {
        "precision": check_precision,
        "meter": lambda: check_meter(steps),
        "prefetch": lambda: check_prefetch(steps),
        "fp16": check_fp16,
        "memory-history": lambda: check_memory_history(work),
        "tune-loop": check_tune_loop,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--only", default=",".join(SECTIONS))
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args(argv)
    wanted = [s for s in args.only.split(",") if s in SECTIONS]
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    ok = True
    for name, collect in _collectors(args.work, args.steps).items():
        if name not in wanted:
            continue
        t0 = time.perf_counter()
        try:
            evidence = collect() if cuda else {"error": "no CUDA device"}
        except Exception as exc:  # one failing section must not lose the others' numbers
            evidence = {"error": f"{type(exc).__name__}: {exc}"}
        out = judge.write(args.work, name, evidence, time.perf_counter() - t0)
        print(f"{name:15s} {'PASS' if out['pass'] else 'FAIL'}  {out['figure']}", flush=True)
        ok = ok and out["pass"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
