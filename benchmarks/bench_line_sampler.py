"""What sampling the Python stack costs the profiled steps, against the alternative of asking
the profiler for stacks (``with_stack=True``), on three kinds of step: many tiny operators, a
pure-Python stretch, and a few large matmuls.

Arms, run in this process and interleaved (the order shuffled every round), each for a few
steps inside an active profiler window as ``check`` runs them:

- ``profiler``: the window as ``check`` runs it without the sampler (the baseline);
- ``+sampler``: the same with the stack sampler (1 ms, the default);
- ``with_stack``: the profiler recording a Python stack for every operator instead.

The per-round ratio to the baseline is the overhead; the table gives the median and range
of the ratios, and the last line the sampler's median overhead over the workloads.

    python benchmarks/bench_line_sampler.py [--rounds 9] [--steps 8]
"""

from __future__ import annotations

import argparse
import random
import time
import warnings
from collections.abc import Callable
from statistics import median

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from torchdoctor.capture.sampler import StackSampler


def tiny_ops() -> Callable[[], None]:
    m = nn.Sequential(*[nn.Linear(16, 16) for _ in range(40)])
    opt = torch.optim.Adam(m.parameters())
    x = torch.randn(8, 16)

    def step() -> None:
        loss = m(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def python_loop() -> Callable[[], None]:
    data = list(range(200_000))

    def step() -> None:
        total = 0
        for v in data:
            total += v * v
        torch.tensor(float(total)).sqrt()

    return step


def matmuls() -> Callable[[], None]:
    a = torch.randn(768, 768)

    def step() -> None:
        for _ in range(4):
            a @ a

    return step


WORKLOADS = {
    "tiny ops (MLP 40x16, Adam)": tiny_ops,
    "Python loop (200k)": python_loop,
    "4 matmuls 768": matmuls,
}


def run_arm(arm: str, step: Callable[[], None], steps: int) -> float:
    """Median step (ms) of ``steps`` steps under ``arm``."""
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], with_stack=arm == "with_stack"):
            sampler = StackSampler() if arm == "+sampler" else None
            if sampler is not None:
                sampler.start()
            try:
                for _ in range(steps):
                    t0 = time.perf_counter()
                    step()
                    times.append(time.perf_counter() - t0)
            finally:
                if sampler is not None:
                    sampler.stop()
    return median(times) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    arms = ["profiler", "+sampler", "with_stack"]
    print(
        f"{torch.__version__}, {args.threads} intra-op thread(s), {args.rounds} rounds x {args.steps} steps"
    )
    print(f"{'workload':<28} {'baseline ms':>11} {'+sampler':>16} {'with_stack':>16}")
    sampler_medians = []
    for name, build in WORKLOADS.items():
        step = build()
        step()
        ratios: dict[str, list[float]] = {a: [] for a in arms[1:]}
        base_ms = []
        for _ in range(args.rounds):
            order = arms[:]
            rng.shuffle(order)
            got = {a: run_arm(a, step, args.steps) for a in order}
            base_ms.append(got["profiler"])
            for a in arms[1:]:
                ratios[a].append(got[a] / got["profiler"])
        cells = [
            f"{median(ratios[a]) - 1:+.1%} [{min(ratios[a]) - 1:+.0%},{max(ratios[a]) - 1:+.0%}]"
            for a in arms[1:]
        ]
        sampler_medians.append(median(ratios["+sampler"]) - 1)
        print(f"{name:<28} {median(base_ms):>11.2f} {cells[0]:>16} {cells[1]:>16}", flush=True)
    print(
        f"stack sampler overhead on the profiled steps: median {median(sampler_medians):+.1%} over the workloads"
    )


if __name__ == "__main__":
    main()
