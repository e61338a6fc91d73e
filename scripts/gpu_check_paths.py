"""GPU check sections that need their own process; each is judged by ``gpu_check_judge``.

    python scripts/gpu_check_paths.py WORK env
    torchrun --standalone --nproc_per_node=1 --local-addr 127.0.0.1 \\
        scripts/gpu_check_paths.py WORK dist
    python scripts/gpu_check_paths.py WORK compile

env      the GPU, torch, the torchdoctor actually imported (must be this checkout's src/) and the
         dependencies the image may lack (msgspec, tomli_w, isal, libcst), with pip's result.
dist     a one-rank NCCL process group made here, then ``strategy="ddp"`` and ``"fsdp"`` over
         it: the DDP wrapper / DTensor parameters present, the loss falls, and a checkpoint
         round trip restores every tensor (verdicts ``ddp`` and ``fsdp``).
compile  ``compile="default"`` and ``"reduce-overhead"`` against eager: losses within 1e-3,
         compile steps kept apart from the steady state.

Exit 0 when every verdict written passed, 1 otherwise.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check_judge as judge

ROOT = Path(__file__).resolve().parents[1]
DEPS = ("msgspec", "tomli_w", "isal", "libcst", "numpy", "click", "rich", "pynvml")


def _mlp(width: int = 1024, depth: int = 3) -> Any:
    from torch import nn

    layers: list[Any] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, 1))


def _train(rt: Any, model: Any, opt: Any, steps: int, width: int = 1024) -> list[float]:
    import torch

    g = torch.Generator().manual_seed(1)
    x = torch.randn(512, width, generator=g).to(rt.device)
    y = x[:, :1].sin()
    losses = []
    for _ in range(steps):
        with rt.autocast():
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        rt.backward(loss)
        rt.step(opt)
        losses.append(loss.detach())
    return [float(v) for v in losses]  # read once, after the steps


# -- env ---------------------------------------------------------------------------------------
def collect_env(pip_rc: int | None) -> dict[str, Any]:
    import torch

    import torchdoctor

    deps: dict[str, str | None] = {}
    for name in DEPS:
        try:
            module = importlib.import_module(name)
            deps[name] = str(getattr(module, "__version__", "") or getattr(module, "__file__", "?"))
        except Exception:
            deps[name] = None
    cuda = torch.cuda.is_available()
    cap = torch.cuda.get_device_capability() if cuda else None
    return {
        "cuda": cuda,
        "device_name": torch.cuda.get_device_name() if cuda else None,
        "capability": f"{cap[0]}.{cap[1]}" if cap else None,
        "device_count": torch.cuda.device_count() if cuda else 0,
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "python": sys.version.split()[0],
        "torchdoctor_file": torchdoctor.__file__,
        "root": str(ROOT),
        "deps": deps,
        "pip_rc": pip_rc,
    }


# -- dist --------------------------------------------------------------------------------------
def _states_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and torch.equal(x.cpu(), y.cpu())):
                return False
        elif isinstance(x, dict):
            if not (isinstance(y, dict) and _states_equal(x, y)):
                return False
        elif x != y:
            return False
    return True


def collect_ddp(work: Path, width: int = 1024) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    import torchdoctor as td

    rt = td.Runtime(strategy="ddp", precision="bf16-mixed")
    torch.manual_seed(0)
    model = rt.setup(_mlp(width))
    opt = rt.setup_optimizer(torch.optim.AdamW(model.parameters(), lr=1e-3))
    losses = _train(rt, model, opt, 12, width)
    path = rt.save_checkpoint(work / "ddp.ckpt", model, opt)
    saved = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
    _train(rt, model, opt, 2, width)  # move away, then load the checkpoint back
    rt.load_checkpoint(path, model, opt)
    return {
        "backend": dist.get_backend(),
        "world_size": dist.get_world_size(),
        "strategy": rt.strategy.name,
        "wrapper": type(model._forward_module).__name__,
        "losses": losses,
        "checkpoint_equal": _states_equal(saved, model.module.state_dict()),
    }


def collect_fsdp(work: Path, width: int = 1024) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    import torchdoctor as td

    rt = td.Runtime(strategy="fsdp", precision="bf16-mixed")
    torch.manual_seed(0)
    model = rt.setup(_mlp(width))
    params = list(model.parameters())
    opt = rt.setup_optimizer(torch.optim.AdamW(params, lr=1e-3))
    losses = _train(rt, model, opt, 12, width)
    path = rt.save_checkpoint(work / "fsdp.ckpt", model, opt)
    saved = rt.strategy.state_dict(model.module)
    _train(rt, model, opt, 2, width)
    rt.load_checkpoint(path, model, opt)
    return {
        "backend": dist.get_backend(),
        "world_size": dist.get_world_size(),
        "strategy": rt.strategy.name,
        "params": len(params),
        "dtensor_params": sum(isinstance(p, DTensor) for p in params),
        "fsdp_units": rt.strategy.describe().get("fsdp_units"),
        "losses": losses,
        "checkpoint_equal": _states_equal(saved, rt.strategy.state_dict(model.module)),
    }


def run_dist(work: Path) -> bool:
    import torch
    import torch.distributed as dist

    ok = True
    if not torch.cuda.is_available():
        for name in ("ddp", "fsdp"):
            ok &= judge.write(work, name, {"error": "no CUDA device"})["pass"]
        return ok
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    # The group the runtime must use: one rank on NCCL (torchrun sets the rendezvous variables).
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    try:
        for name, collect in (("ddp", collect_ddp), ("fsdp", collect_fsdp)):
            t0 = time.perf_counter()
            try:
                evidence = collect(work)
            except Exception as exc:
                evidence = {"error": f"{type(exc).__name__}: {exc}"}
            out = judge.write(work, name, evidence, time.perf_counter() - t0)
            print(f"{name:6s} {'PASS' if out['pass'] else 'FAIL'}  {out['figure']}", flush=True)
            ok &= out["pass"]
    finally:
        dist.destroy_process_group()
    return ok


# -- compile -----------------------------------------------------------------------------------
def collect_compile(steps: int = 15) -> dict[str, Any]:
    import torch

    import torchdoctor as td

    def run(mode: str) -> tuple[list[float], Any]:
        rt = td.Runtime(precision="fp32", compile=mode)
        torch.manual_seed(0)
        model = rt.setup(_mlp(2048, 4))
        opt = rt.setup_optimizer(torch.optim.SGD(model.parameters(), lr=1e-3))
        losses = _train(rt, model, opt, steps, width=2048)
        return losses, rt.meter.summary()

    eager, eager_summary = run("off")
    out: dict[str, Any] = {"eager_step_ms": eager_summary.step_time_ms, "modes": {}}
    for mode in ("default", "reduce-overhead"):
        t0 = time.perf_counter()
        losses, s = run(mode)
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, eager, strict=True))
        out["modes"][mode] = {
            "seconds": time.perf_counter() - t0,
            "compile_steps": s.compile_steps,
            "compile_time_s": s.compile_time_s,
            "steps": s.steps,
            "step_time_ms": s.step_time_ms,
            "first_step_s": s.first_step_s,
            "max_rel_loss_diff_vs_eager": worst,
        }
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("env", "dist", "compile"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    work, name = Path(argv[0]), argv[1]
    work.mkdir(parents=True, exist_ok=True)
    if name == "dist":
        return 0 if run_dist(work) else 1
    t0 = time.perf_counter()
    try:
        import torch

        cuda = torch.cuda.is_available()
        if name == "env":
            pip_rc = json.loads(argv[2]) if len(argv) > 2 and argv[2] else None
            evidence = collect_env(pip_rc)
        else:
            evidence = collect_compile() if cuda else {"error": "no CUDA device"}
    except Exception as exc:
        evidence = {"error": f"{type(exc).__name__}: {exc}"}
    out = judge.write(work, name, evidence, time.perf_counter() - t0)
    print(f"{name:8s} {'PASS' if out['pass'] else 'FAIL'}  {out['figure']}", flush=True)
    return 0 if out["pass"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
