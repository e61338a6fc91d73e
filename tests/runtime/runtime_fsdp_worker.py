"""Worker for test_runtime_fsdp.py, run under ``torchrun --nproc_per_node=2`` (gloo, CPU).

Trains a small block model with ``Runtime(strategy="fsdp")``, saves and reloads a checkpoint,
records one profiled step, and writes ``rank{r}.json`` plus ``trace_rank{r}.json`` into the
folder given as argv[1].
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import torchdoctor as td

STEPS = 3
BATCH = 4  # per rank; the single-process reference uses 2 * BATCH


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.fc(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 32)
        self.blocks = nn.ModuleList([Block(32) for _ in range(3)])
        self.head = nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


def model() -> Net:
    torch.manual_seed(0)
    return Net()


def dataset() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 8, generator=g), torch.randint(0, 3, (64,), generator=g)
    return list(zip(x, y, strict=True))


def _full(net: nn.Module) -> dict[str, list[float]]:
    return {k: v.flatten().tolist() for k, v in net.state_dict().items()}


def main() -> None:
    out = Path(sys.argv[1])
    rt = td.Runtime(strategy="fsdp", precision="fp32", device="cpu", num_workers=0, seed=0)
    net = rt.setup(model())
    opt = rt.setup_optimizer(torch.optim.AdamW(net.parameters(), lr=1e-2))
    result: dict[str, object] = {
        "rank": rt.rank,
        "strategy": rt.config_dict()["strategy"],
        "units": rt.strategy.units,  # type: ignore[attr-defined]
        "local_numel": sum(p.to_local().numel() for p in net.module.parameters()),
        "total_numel": sum(p.numel() for p in net.module.parameters()),
    }
    losses = []
    loader = rt.loader(dataset(), batch_size=BATCH, shuffle=False)
    for i, (x, y) in enumerate(loader):
        if i == STEPS:
            break
        loss = F.cross_entropy(net(x), y)
        rt.backward(loss)
        rt.step(opt)
        losses.append(loss.item())
    summary = rt.meter.summary()
    result.update(
        losses=losses,
        params=_full(net),
        meter_steps=rt.meter.steps,
        meter_samples=list(rt.meter._samples),
        meter_samples_per_s=summary.samples_per_s,
        meter_step_ms=summary.step_time_ms,
        flops_per_step=rt.meter.flops_per_step,
    )
    ckpt = out / "ckpt.pt"
    rt.save_checkpoint(ckpt, net, opt)
    fresh = rt.setup(model())
    fresh_opt = rt.setup_optimizer(torch.optim.AdamW(fresh.parameters(), lr=1e-2))
    rt.load_checkpoint(ckpt, fresh, fresh_opt)
    result["reloaded_params"] = _full(fresh)
    # One more step from the trained and from the reloaded pair must agree (optimizer state too).
    x, y = next(iter(loader))
    after = []
    for m, o in ((net, opt), (fresh, fresh_opt)):
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        o.step()
        o.zero_grad()
        after.append(loss.item())
        after.append(float(sum(p.detach().full_tensor().sum() for p in m.module.parameters())))
    result["after_reload"] = after
    _profile_one_step(rt, net, opt, x, y, out / f"trace_rank{rt.rank}.json")
    (out / f"rank{rt.rank}.json").write_text(json.dumps(result))
    dist.barrier()


def _profile_one_step(
    rt: td.Runtime,
    net: nn.Module,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    path: Path,
) -> None:
    from torch.profiler import ProfilerActivity, profile, schedule

    def export(prof: profile) -> None:
        prof.export_chrome_trace(str(path))

    # A schedule makes the profiler mark ProfilerStep#N around each step.
    plan = schedule(wait=0, warmup=1, active=2, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=plan, on_trace_ready=export) as prof:
        for _ in range(3):
            rt.backward(F.cross_entropy(net(x), y))
            rt.step(opt)
            prof.step()


if __name__ == "__main__":
    main()
