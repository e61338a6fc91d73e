"""Adam/AdamW on the CPU: the for-loop, foreach and fused steps, interleaved in one process.

For each optimizer, parameter shape and intra-op thread count, the three optimizers (same
parameters' shapes, fixed gradients) step in a shuffled order per round, ``--reps`` steps each;
the table gives median ms per step and the per-round ratios (median [min-max]) that decide which
implementation ``host-bound``'s remedy names on a CPU run (``rules/optimizer_fixes.py``).

    python benchmarks/bench_cpu_optimizer_impl.py --rounds 12
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import torch

ARMS = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def linears(n: int, width: int) -> Callable[[], torch.nn.Module]:
    return lambda: torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(n)])


def mlp() -> torch.nn.Module:  # about 1M parameters in 4 tensors
    return torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512)
    )


def vectors() -> torch.nn.Module:  # examples/check/tiny_ops.py's parameters
    return torch.nn.ParameterList(torch.nn.Parameter(torch.ones(16)) for _ in range(80))


CASES: list[tuple[str, Callable[[], torch.nn.Module], tuple[str, ...]]] = [
    ("80x Parameter(16), as tiny_ops.py", vectors, ("Adam",)),
    ("48x Linear(8, 8)", linears(48, 8), ("Adam", "AdamW")),
    ("48x Linear(16, 16)", linears(48, 16), ("Adam",)),
    ("8x Linear(256, 256)", linears(8, 256), ("Adam",)),
    ("MLP 512-1024-512", mlp, ("Adam", "AdamW")),
]


def span(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"{statistics.median(xs):.2f} [{xs[0]:.2f}-{xs[-1]:.2f}]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--reps", type=int, default=10, help="steps per arm per round")
    a = p.parse_args()
    print(f"torch {torch.__version__}; rounds {a.rounds}, {a.reps} steps per arm per round")
    print(
        "| optimizer | parameters | threads | loop ms | foreach ms | fused ms "
        "| foreach/loop | fused/loop | fused/foreach | rounds fused slower than foreach |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    for label, build, classes in CASES:
        for cls_name in classes:
            for threads in (1, 2):
                torch.set_num_threads(threads)
                opts = {}
                for arm, kw in ARMS.items():
                    torch.manual_seed(0)
                    model = build()
                    for q in model.parameters():
                        q.grad = torch.randn_like(q)
                    opts[arm] = getattr(torch.optim, cls_name)(model.parameters(), lr=1e-3, **kw)
                    for _ in range(3):  # warm-up (state allocated at the first step)
                        opts[arm].step()
                ms: dict[str, list[float]] = {arm: [] for arm in ARMS}
                for _ in range(a.rounds):
                    for arm in random.sample(list(ARMS), len(ARMS)):
                        t0 = time.perf_counter()
                        for _ in range(a.reps):
                            opts[arm].step()
                        ms[arm].append((time.perf_counter() - t0) / a.reps * 1e3)
                params = opts["loop"].param_groups[0]["params"]
                n = sum(q.numel() for q in params)
                r = {
                    (x, y): [i / j for i, j in zip(ms[x], ms[y], strict=True)]
                    for x, y in (("foreach", "loop"), ("fused", "loop"), ("fused", "foreach"))
                }
                slower = sum(v > 1 for v in r["fused", "foreach"])
                print(
                    f"| {cls_name} | {label} ({len(params)} tensors, {n} elements) | {threads} | "
                    + " | ".join(f"{statistics.median(ms[arm]):.3f}" for arm in ARMS)
                    + " | "
                    + " | ".join(span(v) for v in r.values())
                    + f" | {slower}/{a.rounds} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
