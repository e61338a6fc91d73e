"""DDP over gloo on the CPU where rank 1 spins 50 ms per step before its forward, so rank 0 waits
in the gradient all-reduce. Run under torchrun; writes OUT/rank<R>.json (torch.profiler traces)
and OUT/ops0.json (rank 0's operator summary as ``check`` computes it).

Usage: torchrun --nproc_per_node=2 ddp_slow_rank.py OUT
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from torchdoctor.capture.profiling import summarise_ops


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)]))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    acts = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(4):
            x = torch.randn(16, 64)
            if rank == 1:  # the slow rank: its own work takes 50 ms longer
                until = time.perf_counter() + 0.05
                while time.perf_counter() < until:
                    pass
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    prof.export_chrome_trace(str(out / f"rank{rank}.json"))
    if rank == 0:
        (out / "ops0.json").write_text(json.dumps(summarise_ops(prof.events(), 4)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
