"""GPU checks of the torchdoctor runtime; writes ``gpu_check_runtime.json`` into the folder argv[1].

    python scripts/gpu_check_runtime.py OUT_DIR [--compile] [--steps 30]

1. ``auto`` precision on this GPU: what it chose, why, and the peak-table entry.
2. The device prefetcher: results equal synchronous copies; a profiled run shows whether the
   host-to-device copies ran on a side stream while kernels ran on the compute stream (read from
   the profiler's trace), and step time with prefetch against without.
3. MFU of a small GPT-style model (bf16 on sm80+): the meter's FLOPs, step time and MFU, next to
   the analytic 6·N·T + attention FLOPs.

Safe to import anywhere; without CUDA it writes {"skipped": ...} and exits 0. Works with
torch >= 2.5.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


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


def overlap_from_trace(trace: dict[str, Any]) -> dict[str, Any]:
    """Share of host-to-device copy time that ran while a kernel ran on another stream."""
    events = trace.get("traceEvents", [])
    copies = _intervals(events, "gpu_memcpy")
    kernels = sorted(_intervals(events, "kernel"))
    copy_us = sum(b - a for a, b, _ in copies)
    overlapped = 0.0
    for a, b, stream in copies:
        covered: list[tuple[float, float]] = []
        for ka, kb, ks in kernels:
            if ks != stream and ka < b and kb > a:
                covered.append((max(a, ka), min(b, kb)))
        overlapped += _union_length(covered)
    return {
        "copy_events": len(copies),
        "copy_streams": sorted({s for _, _, s in copies}),
        "kernel_streams": sorted({s for _, _, s in kernels}),
        "copy_us": copy_us,
        "copy_overlapped_with_kernels_us": overlapped,
        "overlap_share": overlapped / copy_us if copy_us else None,
    }


def _union_length(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


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
        "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
    }


def _prefetch_workload(depth: int, steps: int, trace_path: Path | None) -> float:
    """Median step seconds of a copy-heavy loop with ``device_prefetch=depth``."""
    import torch

    import torchdoctor as td

    rt = td.Runtime(precision="fp32", device_prefetch=depth)
    torch.manual_seed(0)
    layer = torch.nn.Linear(4096, 4096).to(rt.device)
    # 64 MiB per batch from pinned memory: about as long to copy as the matmuls take to run.
    batches = [torch.randn(4096, 4096).pin_memory() for _ in range(steps)]
    times: list[float] = []
    prof = None
    if trace_path is not None:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    torch.cuda.synchronize()
    for x in rt.prefetcher(batches):
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(8):
                x = torch.tanh(layer(x))
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if prof is not None:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(str(trace_path))
    times.sort()
    return times[len(times) // 2]


def check_prefetcher(steps: int) -> dict[str, Any]:
    import torch

    from torchdoctor.runtime.data import DevicePrefetcher
    from torchdoctor.runtime.transfer import map_tensors

    device = torch.device("cuda", torch.cuda.current_device())
    host = [{"x": torch.randn(256, 256), "y": (torch.arange(i, i + 8),)} for i in range(10)]
    pinned = [map_tensors(b, lambda t: t.pin_memory()) for b in host]
    got = list(DevicePrefetcher(pinned, device, depth=3))
    equal = all(
        torch.equal(g["x"].cpu(), h["x"]) and torch.equal(g["y"][0].cpu(), h["y"][0])
        for g, h in zip(got, host, strict=True)
    )
    with tempfile.TemporaryDirectory() as tmp:
        trace_path = Path(tmp) / "prefetch.json"
        _prefetch_workload(2, 6, trace_path)  # short profiled window
        overlap = overlap_from_trace(json.loads(trace_path.read_text()))
    sync_s = _prefetch_workload(0, steps, None)
    ahead_s = _prefetch_workload(2, steps, None)
    share = overlap["overlap_share"] or 0.0
    return {
        # The evidence that prefetch works: copies on a side stream, mostly hidden under kernels.
        "pass": equal and share >= 0.5,
        "equal_to_synchronous_copies": equal,
        "trace": overlap,
        "median_step_ms_prefetch_0": sync_s * 1e3,
        "median_step_ms_prefetch_2": ahead_s * 1e3,
        "speedup": sync_s / ahead_s,
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument(
        "--compile", action="store_true", help="also measure MFU with compile=default"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {}
    try:
        import torch
    except ImportError:
        result["skipped"] = "torch is not installed"
    else:
        result["torch"] = torch.__version__
        if not torch.cuda.is_available():
            result["skipped"] = "no CUDA device"
    if "skipped" not in result:
        checks = {
            "precision": check_precision,
            "prefetcher": lambda: check_prefetcher(args.steps),
            "mfu_eager": lambda: check_mfu(args.steps, "off"),
        }
        if args.compile:
            checks["mfu_compiled"] = lambda: check_mfu(args.steps, "default")
        for name, fn in checks.items():
            t0 = time.perf_counter()
            try:
                result[name] = fn()
            except Exception as exc:  # one failing check must not lose the others' numbers
                result[name] = {"error": f"{type(exc).__name__}: {exc}"}
            result[name]["seconds"] = time.perf_counter() - t0
            (args.out / "gpu_check_runtime.json").write_text(
                json.dumps(result, indent=2, default=str)
            )
    (args.out / "gpu_check_runtime.json").write_text(json.dumps(result, indent=2, default=str))
    print(
        json.dumps({k: v for k, v in result.items() if k != "mfu_eager"}, indent=2, default=str)[
            :4000
        ]
    )
    failed = [k for k, v in result.items() if isinstance(v, dict) and v.get("pass") is False]
    return 1 if failed or any("error" in v for v in result.values() if isinstance(v, dict)) else 0


if __name__ == "__main__":
    sys.exit(main())
