"""A training loop fed by a plain Python generator (no DataLoader), profiled with torch.profiler.

Usage: python generator_pipeline.py OUT.json [decode_ms]

Each batch is "decoded" in Python for ``decode_ms`` (default 15) before the model sees it, the way
a hand-written reader or a DALI-style iterator runs outside torch operators. The trace is the case
for the input-pipeline rule: the step begins with the CPU outside any torch operator.
"""

from __future__ import annotations

import sys
import time

import torch


def batches(n: int, decode_ms: float):
    for _ in range(n):
        until = time.perf_counter() + decode_ms / 1000.0
        while time.perf_counter() < until:  # work outside torch: parsing, augmenting
            sum(range(2000))  # in chunks: a clock call per pass made 36 MB of Python events
        yield torch.randn(64, 256), torch.randint(0, 10, (64,))


def main(out: str, decode_ms: float) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sched = torch.profiler.schedule(wait=0, warmup=2, active=5, repeat=1)
    acts = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=acts, schedule=sched, with_stack=True) as prof:
        for x, y in batches(8, decode_ms):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 15.0)
