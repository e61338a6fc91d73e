"""What a real contended slow-down of intra-op threads looks like: the thread probe's own work
(``cpu_usage.thread_probe``: 4 x a 192x192 matmul and a 64 Ki-element add) and a whole step of
batched conv inference (``examples/unlisted/control_conv_scoring.py``'s model, 16 32x32 images)
timed with the script's thread count (``--threads``, default 2) and with 1, interleaved in one
process (the arms shuffled per round), optionally beside ``--hogs`` busy processes.

For each workload: the per-round slow-down (median [min-max]) and how much of the extra time the
helpers' wait for a core covers (their schedstat, read as the step clock reads it): the
slow-down is the threads waiting for cores, however large, and its size is set by the length of
a parallel region against a time slice, not by the thread count (the probe's regions are a few
100 us, a conv layer's several ms).

    python benchmarks/bench_thread_probe_contended.py --rounds 9 --hogs 2
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

from torchdoctor.capture.cpu_usage import StepWait


def probe_work() -> Callable[[], None]:
    x, y = torch.randn(192, 192), torch.randn(1 << 16)

    def work() -> None:
        for _ in range(4):
            torch.mm(x, x)
            torch.add(y, 1.0)

    return work


def conv_step() -> Callable[[], None]:
    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)
        )

    torch.manual_seed(0)
    model = nn.Sequential(
        block(3, 32), block(32, 64), block(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten()
    ).eval()
    images = torch.randn(16, 3, 32, 32)

    def step() -> None:
        with torch.inference_mode():
            model(images)

    return step


def timed(work: Callable[[], None], threads: int, wait: StepWait) -> tuple[float, float]:
    """(seconds, helpers' and main's wait for a core in seconds) of one run at ``threads``."""
    torch.set_num_threads(threads)
    work()  # the pool settles on its size
    wait.refresh()
    before, t0 = wait.read(), time.perf_counter()
    work()
    wall, after = time.perf_counter() - t0, wait.read()
    if before is None or after is None:
        return wall, float("nan")
    return wall, ((after[1] - before[1]) + (after[2] - before[2])) / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--hogs", type=int, default=0, help="busy processes started beside it")
    args = p.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.hogs)]
    try:
        wait = StepWait()
        for name, work in (("probe work", probe_work()), ("conv step", conv_step())):
            ratios, covered, ms = [], [], {1: [], args.threads: []}
            for _ in range(args.rounds):
                got = {n: timed(work, n, wait) for n in random.sample([1, args.threads], 2)}
                (ta, wa), (tb, _) = got[args.threads], got[1]
                ratios.append(ta / tb)
                covered.append(wa / (ta - tb) if ta > tb else float("nan"))
                for n, (t, _) in got.items():
                    ms[n].append(t * 1e3)
            ratios.sort()
            print(
                f"{name}: {statistics.median(ms[1]):.2f} ms with 1 thread, "
                f"{statistics.median(ms[args.threads]):.2f} ms with {args.threads}; "
                f"slow-down {statistics.median(ratios):.1f}x [{ratios[0]:.1f}-{ratios[-1]:.1f}]; "
                "threads' wait for a core / extra time: "
                f"{statistics.median([c for c in covered if c == c] or [float('nan')]):.2f}"
            )
        wait.close()
    finally:
        for h in hogs:
            h.kill()
            h.wait()


if __name__ == "__main__":
    main()
