"""What ``check``'s model-call step signal costs an inference loop of many small modules.

The signal wraps ``nn.Module.__call__`` for every module until the model is known (the first
module called twice at the top level), then only the model's class. This runs a 121-module
model (30 blocks of Linear, LayerNorm, GELU; one sample, so the Python per module call dominates)
in alternating blocks, unwatched and watched, in one process (one thread), and reports the
per-block ratio of median call times, watched over unwatched, for the narrowed wrapper, and the
cost of the first (discovery) call.

    python benchmarks/bench_forward_signal.py [--blocks 15] [--block-calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any


class _Clock:
    """Counts ticks like the real clock, never opens a window."""

    def __init__(self) -> None:
        self.source: str | None = None
        self.errors: list[str] = []
        self.ticks = 0

    def tick(self, source: str) -> None:
        self.source = self.source or source
        self.ticks += 1


def _model() -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.c = nn.Linear(8, 8), nn.LayerNorm(8), nn.GELU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c(self.b(self.a(x)))

    return nn.Sequential(*[Block() for _ in range(30)]).eval()


def _median_call_us(model: Any, x: Any, calls: int) -> float:
    import torch

    times = []
    with torch.no_grad():
        for _ in range(calls):
            t = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=15)
    ap.add_argument("--block-calls", type=int, default=200)
    args = ap.parse_args()
    import torch

    from torchdoctor.capture.forward_steps import ForwardSteps

    torch.set_num_threads(1)
    model, x = _model(), torch.randn(1, 8)
    _median_call_us(model, x, 50)  # warm up
    rows, ratios, first = [], [], []
    for b in range(args.blocks):
        plain = _median_call_us(model, x, args.block_calls)
        steps = ForwardSteps(_Clock())  # type: ignore[arg-type]
        steps.install()
        t = time.perf_counter()
        with torch.no_grad():
            model(x)  # discovery: every module goes through the wrapper
        first.append((time.perf_counter() - t) * 1e6 / plain)
        watched = _median_call_us(model, x, args.block_calls)  # narrowed from the 2nd call
        steps.uninstall()
        ratios.append(watched / plain)
        rows.append((b + 1, plain, watched, watched / plain))
    print(f"{'block':>5} {'plain us':>9} {'watched us':>11} {'ratio':>6}")
    for b, p, w, r in rows:
        print(f"{b:>5} {p:>9.1f} {w:>11.1f} {r:>6.3f}")
    print(f"first (discovery) call: median {statistics.median(first):.2f}x an unwatched call")
    print(
        f"watched / unwatched call time after discovery: median {statistics.median(ratios):.3f} "
        f"(blocks {min(ratios):.3f}-{max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
