"""A small DDP training loop under torchrun (gloo, CPU) that writes one profiler trace per rank.

    torchrun --nproc_per_node=N ddp_ranks_worker.py OUT_DIR [--slow-rank R --slow-ms MS]
                                                           [--crash-rank R --crash-step S]

``--slow-rank`` gives one rank extra work of its own in every step (matmuls, not sleep);
``--crash-rank`` makes one rank raise inside step ``S``: its trace (written on the way out of the
profiler) ends early and the other ranks wait in the next collective until gloo gives up.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=0.0)
    ap.add_argument("--crash-rank", type=int, default=-1)
    ap.add_argument("--crash-step", type=int, default=3)
    ap.add_argument("--crash-hard", action="store_true", help="die without writing a trace")
    args = ap.parse_args()
    # torchrun stops the other ranks with SIGTERM once one fails: unwind so the trace is written
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    burn = torch.randn(256, 256)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    try:
        with prof:
            for step in range(args.steps):
                with torch.profiler.record_function(f"ProfilerStep#{step}"):
                    if rank == args.crash_rank and step == args.crash_step:
                        time.sleep(1.0)  # the others reach the collective and wait, as in life
                        if args.crash_hard:
                            os._exit(1)  # like a segfault or an OOM kill: no trace at all
                        raise RuntimeError(f"rank {rank} crashed on purpose at step {step}")
                    if rank == args.slow_rank:
                        _burn(burn, args.slow_ms)
                    loss = nn.functional.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
    finally:
        prof.export_chrome_trace(str(out / f"rank{rank}.json"))
        if args.crash_rank < 0:
            dist.destroy_process_group()


def _burn(m: torch.Tensor, ms: float) -> None:
    """The slow rank's own extra work: matmuls for about ``ms`` milliseconds."""
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        m = torch.tanh(m @ m)


if __name__ == "__main__":
    main()
