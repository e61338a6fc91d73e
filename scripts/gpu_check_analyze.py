"""GPU check for the analyser: profile loops with one planted problem each, analyse, score.

Usage: python scripts/gpu_check_analyze.py OUT_DIR
Writes OUT_DIR/analyze_gpu.json (and the traces) with, per case, the expected finding, the
findings torchdoctor reported (id, saving, share) and whether the verdict was right. Exits 0 with
a note when no CUDA device is present.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _profile(out: Path, name: str, step: Callable[[], None], steps: int = 6) -> Path:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    trace = out / f"{name}.json.gz"
    sched = schedule(wait=1, warmup=2, active=steps, repeat=1)
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(
        activities=acts, schedule=sched, on_trace_ready=lambda p: p.export_chrome_trace(str(trace))
    ) as prof:
        for _ in range(steps + 3):
            step()
            prof.step()
    torch.cuda.synchronize()
    return trace


def _cases() -> dict[str, tuple[str | None, Callable[[], None]]]:
    import torch
    from torch import nn

    dev = torch.device("cuda")
    big = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(4)]).to(dev)
    opt = torch.optim.SGD(big.parameters(), lr=1e-3)
    x = torch.randn(4096, 4096, device=dev)
    tiny = nn.Sequential(*[nn.Linear(32, 32) for _ in range(200)]).to(dev)
    xt = torch.randn(8, 32, device=dev)
    host = torch.randn(64, 3, 224, 224)

    def fp32_step() -> None:
        torch.backends.cuda.matmul.allow_tf32 = False
        opt.zero_grad()
        big(x).sum().backward()
        opt.step()

    def bf16_step() -> None:
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = big(x).float().sum()
        loss.backward()
        opt.step()

    def tiny_step() -> None:
        tiny(xt).sum().backward()

    def sync_step() -> None:
        for _ in range(20):
            y = big[0](x)
            y.sum().item()  # a host sync per layer

    def pageable_step() -> None:
        host.to(dev)  # pageable source: a slow, blocking copy
        big(x)

    return {
        "fp32_matmul": ("fp32-gemm-no-tensor-cores", fp32_step),
        "bf16_matmul": (None, bf16_step),
        "tiny_ops": ("host-bound", tiny_step),
        "item_sync": ("sync-stalls", sync_step),
        "pageable_copy": ("pageable-h2d-copies", pageable_step),
    }


def main(out_dir: str) -> int:
    import torch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        (out / "analyze_gpu.json").write_text(json.dumps({"skipped": "no CUDA device"}))
        print("no CUDA device: skipped")
        return 0
    from torchdoctor.report.build import analyze_path

    results: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    for name, (expected, step) in _cases().items():
        t0 = time.perf_counter()
        report = analyze_path(_profile(out, name, step))
        found = [
            {
                "id": f.id,
                "saving_ms": f.saving_ms_per_step,
                "share": f.share_of_step,
                "severity": f.severity,
            }
            for f in report.findings
        ]
        ids = [f["id"] for f in found]
        ok = (expected in ids) if expected else ("fp32-gemm-no-tensor-cores" not in ids)
        results[name] = {
            "expected": expected,
            "ok": ok,
            "findings": found,
            "verdict": report.verdict,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        print(f"{name:14s} expected={expected!s:28s} ok={ok} top={ids[:3]}")
    (out / "analyze_gpu.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "gpu-check-out"))
