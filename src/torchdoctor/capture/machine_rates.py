"""This CPU's attainable rates, measured once per run in a fraction of a second: the matmul
FLOP/s of each dtype the step computes in, and the memory bandwidth of a large copy, with the
intra-op thread count the script runs with.

Each rate is the best of a few repetitions within a small time budget: the attainable rate is
what the machine can do, and on a shared machine the slow repetitions measure the neighbours.
"""

from __future__ import annotations

import time
from typing import Any

from torchdoctor.roofline import Attainable

MATMUL_N = {"fp32": 1024, "fp64": 768, "bf16": 768, "fp16": 512}
"""Square matmul sizes: large enough to reach the library's peak, small enough to be quick."""
COPY_BYTES = 64 * 2**20
"""Bytes per copy (read and written once each): beyond the last-level cache of most CPUs."""
BUDGET_S = 0.04
"""Time spent per rate (after one warm-up repetition)."""


def _best_rate(run: Any, work: float, budget_s: float) -> float:
    run()  # warm-up: first-touch page faults, thread pool start-up
    best = 0.0
    t_end = time.perf_counter() + budget_s
    reps = 0
    while reps < 3 or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        run()
        dt = time.perf_counter() - t0
        if dt > 0:
            best = max(best, work / dt)
        reps += 1
        if reps >= 50:
            break
    return best


def best_of(a: Attainable | None, b: Attainable) -> Attainable:
    """The higher of two measurements of each rate (taken at different moments of the run)."""
    if a is None:
        return b
    keys = set(a.flops_per_s) | set(b.flops_per_s)
    rates = {k: max(a.flops_per_s.get(k, 0.0), b.flops_per_s.get(k, 0.0)) for k in keys}
    return Attainable(
        device=b.device,
        flops_per_s=rates,
        bytes_per_s=max(a.bytes_per_s, b.bytes_per_s),
        source=b.source.replace("best of", "best of two moments of", 1),
    )


def measure_cpu(dtypes: tuple[str, ...] = ("fp32",), budget_s: float = BUDGET_S) -> Attainable:
    """Attainable CPU rates now: matmul FLOP/s for ``dtypes`` (fp32 always) and copy bytes/s."""
    import torch

    torch_dtypes = {
        "fp32": torch.float32,
        "fp64": torch.float64,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
    }
    rates: dict[str, float] = {}
    with torch.no_grad():
        for d in dict.fromkeys(("fp32", *dtypes)):
            if d not in torch_dtypes:
                continue
            n = MATMUL_N[d]
            a = torch.randn(n, n).to(torch_dtypes[d])
            b = torch.randn(n, n).to(torch_dtypes[d])
            out = torch.empty(n, n, dtype=torch_dtypes[d])
            rates[d] = _best_rate(
                lambda a=a, b=b, out=out: torch.mm(a, b, out=out), 2.0 * n**3, budget_s
            )
            del a, b, out
        elems = COPY_BYTES // 4
        src = torch.ones(elems)
        dst = torch.empty(elems)
        bandwidth = _best_rate(lambda dst=dst, src=src: dst.copy_(src), 2.0 * COPY_BYTES, budget_s)
        del src, dst
    threads = torch.get_num_threads()
    return Attainable(
        device="cpu",
        flops_per_s=rates,
        bytes_per_s=bandwidth,
        source=(
            f"measured on this CPU with {threads} intra-op thread{'s' if threads != 1 else ''}: "
            f"best of repeated {'/'.join(f'{MATMUL_N[d]}x{MATMUL_N[d]} {d}' for d in rates)} "
            f"matmuls and {COPY_BYTES >> 20} MiB copies"
        ),
    )
