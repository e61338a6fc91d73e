"""GPU checks of the runtime's CUDA paths; each writes ``OUT/paths_<name>.json``.

    python scripts/gpu_check_paths.py OUT NAME      (NAME: fp16 | meter | compile | ddp)
    torchrun --nproc_per_node=1 scripts/gpu_check_paths.py OUT ddp

fp16     fp16-mixed with the GradScaler forced (even where bf16 runs): one overflowing step must
         be skipped and counted once, the others applied.
meter    the meter's CUDA events against host-clock timing of the same synchronised steps, and
         events recorded on the meter's own device's stream.
compile  compile="default" and "reduce-overhead" against eager: compile steps kept apart, the
         steady state, and the losses equal to eager's within fp32 tolerance.
ddp      the runtime under torchrun (NCCL, world size 1): DDP wrapping, a trained step.

Without CUDA each writes {"skipped": "no CUDA device"} and exits 0. Exit 1 when a check failed.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any


def _mlp(width: int = 2048, depth: int = 4) -> Any:
    from torch import nn

    layers: list[Any] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, 1))


def _train(
    rt: Any,
    steps: int,
    width: int = 2048,
    inf_at: int | None = None,
    after_step: Any = None,
) -> list[float]:
    import torch

    torch.manual_seed(0)
    model = _mlp(width)
    model, opt = rt.setup(model, torch.optim.SGD(model.parameters(), lr=1e-3))
    x = torch.randn(1024, width, device=rt.device)
    losses = []
    for step in range(steps):
        with rt.autocast():
            loss = model(x).float().square().mean()
        if step == inf_at:
            loss = loss * float("inf")  # an overflow the scaler must skip
        rt.backward(loss)
        rt.step(opt)
        if after_step is not None:
            after_step()
        losses.append(float(loss.detach()))
    return losses


def check_fp16(device: str | None = None, width: int = 2048) -> dict[str, Any]:
    import torchdoctor as td

    rt = td.Runtime(precision="fp16-mixed", device=device)
    scale0 = rt.scaler.get_scale()
    _train(rt, 12, width=width, inf_at=5)
    s = rt.meter.summary()
    return {
        "precision": rt.precision.precision,
        "grad_scaler": rt.scaler is not None,
        "skipped_steps": s.skipped_steps,
        "scale_before_after": [scale0, rt.scaler.get_scale()],
        "timing": s.timing,
        "pass": s.skipped_steps == 1 and rt.scaler.get_scale() < scale0,
    }


def check_meter() -> dict[str, Any]:
    import torch

    import torchdoctor as td

    rt = td.Runtime(precision="fp32", device="cuda:0")
    marks = [time.perf_counter()]

    def host_clock() -> None:  # synchronised host timing of the very same steps
        torch.cuda.synchronize()
        marks.append(time.perf_counter())

    _train(rt, 14, width=4096, after_step=host_clock)
    s = rt.meter.summary()
    host = sorted(b - a for a, b in itertools.pairwise(marks[2:]))  # after 2 warm-ups
    host_ms = host[len(host) // 2] * 1e3
    ratio = (s.step_time_ms or 0) / host_ms
    return {
        "timing": s.timing,
        "events_step_ms": s.step_time_ms,
        "host_step_ms": host_ms,
        "events_over_host": ratio,
        "pass": s.timing == "cuda events" and 0.8 < ratio < 1.25,
    }


def check_compile() -> dict[str, Any]:
    import torchdoctor as td

    out: dict[str, Any] = {}
    eager = _train(td.Runtime(precision="fp32", compile="off"), 15)
    for mode in ("default", "reduce-overhead"):
        t0 = time.perf_counter()
        rt = td.Runtime(precision="fp32", compile=mode)
        losses = _train(rt, 15)
        s = rt.meter.summary()
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, eager, strict=True))
        out[mode] = {
            "seconds": time.perf_counter() - t0,
            "compile_steps": s.compile_steps,
            "compile_time_s": s.compile_time_s,
            "step_time_ms": s.step_time_ms,
            "first_step_s": s.first_step_s,
            "max_rel_loss_diff_vs_eager": worst,
            "pass": s.steps >= 5 and worst < 1e-3,
        }
    out["pass"] = all(v["pass"] for v in out.values() if isinstance(v, dict))
    return out


def check_ddp() -> dict[str, Any]:
    import torch.distributed as dist

    import torchdoctor as td

    rt = td.Runtime(precision="fp32")
    losses = _train(rt, 8)
    backend = dist.get_backend() if dist.is_initialized() else None
    s = rt.meter.summary()
    return {
        "backend": backend,
        "world_size": dist.get_world_size() if dist.is_initialized() else 1,
        "losses_first_last": [losses[0], losses[-1]],
        "steps": s.steps,
        "pass": backend == "nccl" and losses[-1] < losses[0],
    }


CHECKS = {"fp16": check_fp16, "meter": check_meter, "compile": check_compile, "ddp": check_ddp}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in CHECKS:
        print(f"usage: gpu_check_paths.py OUT {{{'|'.join(CHECKS)}}}", file=sys.stderr)
        return 2
    out, name = Path(argv[0]), argv[1]
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any]
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if not cuda:
        result = {"skipped": "no CUDA device"}
    else:
        t0 = time.perf_counter()
        try:
            result = CHECKS[name]()
        except Exception as exc:  # the evidence is the error itself
            result = {"error": f"{type(exc).__name__}: {exc}", "pass": False}
        result["seconds"] = time.perf_counter() - t0
        result["torch"] = torch.__version__
    (out / f"paths_{name}.json").write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result, default=str))
    return 0 if result.get("pass", True) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
