"""Step time of a training loop with ``torchdoctor check`` watching (every hook installed,
outside the profiled window) vs the same loop unwatched: the cost of watching.

Both run in one process, in alternating blocks of steps (plain, watched, plain, ...), so machine
noise lands on both alike; each block contributes its median step time. A step is a whole loop
iteration: batch fetch through the DataLoader, forward, backward, optimizer step, one
``.item()`` and one ``.to(non_blocking=True)``: every hook ``check`` installs fires each step.

    python benchmarks/bench_check_overhead.py [--blocks 20] [--block-steps 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def make_workload(kind: str) -> Callable[[], None]:
    """One training step of ``kind`` ("mlp": few large ops; "tiny-ops": ~700 small ops)."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    if kind == "mlp":
        model: nn.Module = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
        opt: Any = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        width = 256
    else:
        layers = [m for _ in range(30) for m in (nn.Linear(16, 16), nn.Tanh())]
        model = nn.Sequential(*layers, nn.Linear(16, 10))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
        width = 16
    data = TensorDataset(torch.randn(4096, width), torch.randint(0, 10, (4096,)))
    loader = DataLoader(data, batch_size=64, shuffle=True)

    def batches() -> Iterator[Any]:
        while True:
            yield from loader

    it = batches()

    def step() -> None:
        x, y = next(it)
        x = x.to("cpu", non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()

    return step


def block_median_ms(step: Callable[[], None], n: int) -> float:
    """Median wall time of ``n`` steps, in milliseconds."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def watched(folder: Path) -> Any:
    """A ``check`` session with a window that never opens (warm-up longer than any run)."""
    from torchdoctor.capture.options import CheckOptions
    from torchdoctor.capture.runfolder import RankInfo
    from torchdoctor.capture.session import Session

    session = Session(CheckOptions(warmup_steps=10**9, full=True), folder, RankInfo())
    session.install()
    # Measuring on, as after the warm-up: the sync and copy wrappers record every call.
    session.set_measuring(True)
    return session


def compare(kind: str, blocks: int, block_steps: int, folder: Path) -> tuple[list[float], ...]:
    """Per-block medians (ms) for plain and watched, alternating."""
    step = make_workload(kind)
    block_median_ms(step, 50)  # warm-up: allocator, thread pools, optimizer state
    plain, seen = [], []
    for _ in range(blocks):
        plain.append(block_median_ms(step, block_steps))
        session = watched(folder)
        try:
            seen.append(block_median_ms(step, block_steps))
        finally:
            session.uninstall()
    return plain, seen


def per_call_us(fn: Callable[[], Any], n: int = 20000) -> float:
    """Median over 5 repeats of the mean cost of one ``fn()`` call, in microseconds."""
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(runs)


def hook_costs(folder: Path) -> list[tuple[str, float, float]]:
    """(call, plain us, watched us) for each call a hook wraps, measuring on."""
    import torch

    from torchdoctor.capture import markers

    scalar, x = torch.tensor(1.0), torch.ones(64)
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("tensor.item()", lambda: scalar.item()),
        ("x.to('cpu', non_blocking=True)", lambda: x.to("cpu", non_blocking=True)),
        ("torchdoctor.step() / step tick", markers.step),
    ]
    plain = {name: per_call_us(fn) for name, fn in calls}
    session = watched(folder)
    try:
        seen = {name: per_call_us(fn) for name, fn in calls}
    finally:
        session.uninstall()
    return [(name, plain[name], seen[name]) for name, _ in calls]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=20)
    p.add_argument("--block-steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    worst = 0.0
    with tempfile.TemporaryDirectory() as d:
        print(f"{'call':<34} {'plain us':>9} {'check us':>9}")
        for name, plain_us, seen_us in hook_costs(Path(d)):
            print(f"{name:<34} {plain_us:9.2f} {seen_us:9.2f}")
        print()
        print(f"{'workload':<9} {'plain ms':>9} {'check ms':>9} {'ratio':>6} {'IQR of ratios':>15}")
        for kind in ("mlp", "tiny-ops"):
            plain, seen = compare(kind, args.blocks, args.block_steps, Path(d))
            ratios = [s / q for q, s in zip(plain, seen, strict=True)]
            q1, _, q3 = statistics.quantiles(ratios, n=4)
            ratio = statistics.median(ratios)
            worst = max(worst, ratio)
            print(
                f"{kind:<9} {statistics.median(plain):9.3f} {statistics.median(seen):9.3f} "
                f"{ratio:6.3f} {q1:7.3f}-{q3:.3f}"
            )
    print(f"check/plain step-time ratio: {worst:.3f} (worst workload; goal <= 1.03)")


if __name__ == "__main__":
    main()
