"""A held-out case for backend-disabled (written after the rule, never tuned on): a small 2-D
convolutional denoiser whose run configuration (``_runtime_config.py``, another module) switches
oneDNN off in its ``apply()`` for "reproducible" runs. ``--fixed`` leaves oneDNN on; ``--time``
prints the median step and the mean CPU time of a step (after 5 warm-up steps) on standard error."""

import argparse
import sys
import time
from statistics import median

import torch
from _runtime_config import RuntimeConfig
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--fixed", action="store_true")
    p.add_argument("--time", action="store_true")
    args = p.parse_args()
    RuntimeConfig(reproducible=not args.fixed).apply()
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 24, 3, padding=1), nn.ReLU(),
        nn.Conv2d(24, 24, 3, padding=1), nn.ReLU(),
        nn.Conv2d(24, 1, 3, padding=1),
    )  # fmt: skip
    opt = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)
    times, cpu = [], []
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        clean = torch.randn(8, 1, 32, 32)
        noisy = clean + 0.1 * torch.randn_like(clean)
        loss = nn.functional.mse_loss(net(noisy), clean)
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
