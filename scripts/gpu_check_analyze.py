"""GPU check, analyze section: loops with one planted problem each, profiled on CUDA, then
``torchdoctor analyze TRACE --json`` (the command users run) on each trace.

    python scripts/gpu_check_analyze.py WORK

Traces stay in ``WORK/analyze`` (they do not travel back); the verdict (``gpu_check_judge``) holds,
per case, the expected finding, the ids analyze reported, and the GEMM / attention kernels it saw
with how it classified them (name, tensor cores, dtype, time): the record of which cuBLAS kernel
names this GPU runs. Exit 0 when every planted case was found (and the clean one left clean), 1
when one was missed or could not run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check_judge as judge

# case -> (finding that must be reported, finding that must not be)
PLANTED: dict[str, tuple[str | None, str | None]] = {
    "fp32_matmul": ("fp32-gemm-no-tensor-cores", None),
    "bf16_matmul": (None, "fp32-gemm-no-tensor-cores"),
    "tiny_ops": ("host-bound", None),
    "item_sync": ("sync-stalls", None),
    "pageable_copy": ("pageable-h2d-copies", None),
}


def _profile(path: Path, step: Callable[[], None], steps: int = 6) -> Path:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    sched = schedule(wait=1, warmup=2, active=steps, repeat=1)
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(
        activities=acts,
        schedule=sched,
        record_shapes=True,  # "Input type": the dtype of a GEMM whose kernel name does not say it
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(steps + 3):
            step()
            prof.step()
    torch.cuda.synchronize()
    return path


def _steps() -> dict[str, Callable[[], None]]:
    import torch
    from torch import nn

    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False  # strict fp32: what fp32_matmul plants
    big = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(4)]).to(dev)
    opt = torch.optim.SGD(big.parameters(), lr=1e-3)
    x = torch.randn(4096, 4096, device=dev)
    tiny = nn.Sequential(*[nn.Linear(32, 32) for _ in range(200)]).to(dev)
    xt = torch.randn(8, 32, device=dev)
    host = torch.randn(64, 3, 224, 224)  # pageable

    def fp32_step() -> None:
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
            big[0](x).sum().item()  # a host sync per layer

    def pageable_step() -> None:
        host.to(dev)  # pageable source: a staged, blocking copy
        big(x)

    return {
        "fp32_matmul": fp32_step,
        "bf16_matmul": bf16_step,
        "tiny_ops": tiny_step,
        "item_sync": sync_step,
        "pageable_copy": pageable_step,
    }


def analyze(trace: Path, timeout_s: float = 90.0) -> dict[str, Any]:
    """Run ``torchdoctor analyze TRACE --json``: exit status, finding ids and the matmul-family
    kernels with their classification."""
    cmd = [sys.executable, "-m", "torchdoctor", "analyze", str(trace), "--json", "--top", "40"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=os.environ)
    out: dict[str, Any] = {"exit": proc.returncode}
    if proc.returncode != 0:
        out["stderr"] = proc.stderr[-500:]
        return out
    report = json.loads(proc.stdout)
    kernels = report.get("kernels") or {}
    out["ids"] = [f["id"] for f in report.get("findings") or []]
    out["verdict"] = report.get("verdict")
    out["tensor_core_share"] = kernels.get("tensor_core_share")
    out["kernels"] = [
        {k: row.get(k) for k in ("name", "category", "tensor_core", "dtype", "count", "total_ms")}
        for row in kernels.get("top_kernels") or []
        if row.get("category") in ("gemm", "convolution", "attention")
    ]
    return out


def main(argv: list[str]) -> int:
    work = Path(argv[0] if argv else "/tmp/gpu-check")
    folder = work / "analyze"
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    import torch

    if not torch.cuda.is_available():
        judge.write(work, "analyze", {"error": "no CUDA device"})
        print("analyze: no CUDA device", flush=True)
        return 1
    evidence: dict[str, Any] = {
        "planted": len(PLANTED),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cases": {},
    }
    for name, step in _steps().items():
        expected, unexpected = PLANTED[name]
        case: dict[str, Any] = {"expected": expected, "unexpected": unexpected}
        c0 = time.perf_counter()
        try:
            case.update(analyze(_profile(folder / f"{name}.json.gz", step)))
        except Exception as exc:  # the next case still runs
            case["error"] = f"{type(exc).__name__}: {exc}"
        case["seconds"] = round(time.perf_counter() - c0, 1)
        evidence["cases"][name] = case
        print(f"{name:14s} expected={expected!s:28s} got={case.get('ids')}", flush=True)
    out = judge.write(work, "analyze", evidence, time.perf_counter() - t0)
    print(f"analyze {'PASS' if out['pass'] else 'FAIL'}  {out['figure']}", flush=True)
    return 0 if out["pass"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
