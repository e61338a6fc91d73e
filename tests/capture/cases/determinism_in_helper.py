"""A held-out case for deterministic-algorithms (written after the rule, never tuned on): a
small image classifier whose seeding helper, in another module (``_repro.py``), also switches on
deterministic algorithms. ``--fixed`` seeds without them; ``--time`` prints the median step
(after 5 warm-up steps) on standard error."""

import argparse
import sys
import time
from statistics import median

import torch
from _repro import make_reproducible
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    p.add_argument("--time", action="store_true")
    args = p.parse_args()
    make_reproducible(7, strict=not args.fixed)
    net = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 4 * 4, 10),
    )  # fmt: skip
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    images, labels = torch.randn(512, 3, 16, 16), torch.randint(0, 10, (512,))
    times, cpu = [], []
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        idx = torch.randint(0, 512, (16,))
        loss = nn.functional.cross_entropy(net(images[idx]), labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    if args.time:
        # the CPU time too: on a busy machine the wall time measures the other processes
        steady, steady_cpu = times[5:], cpu[5:]
        print(
            f"median_step_ms {median(steady) * 1e3:.3f} "
            f"cpu_ms_per_step {sum(steady_cpu) / len(steady_cpu) * 1e3:.3f}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
