"""This CPU's attainable rates, measured once per run in a fraction of a second: the matmul
FLOP/s of each dtype the step computes in, and the memory bandwidth of a large copy, with the
intra-op thread count the script runs with.

Each rate is the median of a few repetitions within a small time budget, measured at two moments
of the run (before the window and after it) and the better moment kept: the rate this machine
gives the step now, neighbours included, without one unlucky moment deciding it.
"""

from __future__ import annotations

import time
from statistics import median
from typing import Any

from torchdoctor.roofline import Attainable

MATMUL_N = {"fp32": 1024, "fp64": 768, "bf16": 768, "fp16": 512}
"""Square matmul sizes: large enough to reach the library's peak, small enough to be quick."""
CONV_INPUT = (32, 32, 16, 16)
"""The convolution measured: batch 32, 32 -> 64 channels, 16x16, 3x3 kernel."""
COPY_BYTES = 64 * 2**20
"""Bytes per copy (read and written once each): beyond the last-level cache of most CPUs."""
BUDGET_S = 0.04
"""Time spent per rate (after one warm-up repetition)."""


def _rate(run: Any, work: float, budget_s: float) -> float:
    """Work per second of ``run``: the median of its repetitions within ``budget_s`` (at least
    five), after one warm-up. The median, not the best: on a shared machine the rate that
    matters is the one the step gets now, not the one a quiet moment gave."""
    run()  # warm-up: first-touch page faults, thread pool start-up
    times: list[float] = []
    t_end = time.perf_counter() + budget_s
    while len(times) < 5 or (time.perf_counter() < t_end and len(times) < 50):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return work / median(times) if median(times) > 0 else 0.0


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
        source=b.source.replace("median of", "the better of two moments, each the median of", 1),
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
            if d not in torch_dtypes or d not in MATMUL_N:
                continue
            n = MATMUL_N[d]
            a = torch.randn(n, n).to(torch_dtypes[d])
            b = torch.randn(n, n).to(torch_dtypes[d])
            out = torch.empty(n, n, dtype=torch_dtypes[d])
            rates[d] = _rate(
                lambda a=a, b=b, out=out: torch.mm(a, b, out=out), 2.0 * n**3, budget_s
            )
            del a, b, out
        # Convolutions reach a rate of their own (im2col-free direct kernels, narrow channels):
        # one of a mid-sized layer stands for them.
        x = torch.randn(*CONV_INPUT)
        w = torch.randn(CONV_INPUT[1] * 2, CONV_INPUT[1], 3, 3)
        conv_flops = 2.0 * CONV_INPUT[0] * CONV_INPUT[2] * CONV_INPUT[3] * w.shape[0] * w[0].numel()
        rates["fp32/conv"] = _rate(
            lambda x=x, w=w: torch.nn.functional.conv2d(x, w, padding=1), conv_flops, budget_s
        )
        del x, w
        elems = COPY_BYTES // 4
        src = torch.ones(elems)
        dst = torch.empty(elems)
        bandwidth = _rate(lambda dst=dst, src=src: dst.copy_(src), 2.0 * COPY_BYTES, budget_s)
        del src, dst
    threads = torch.get_num_threads()
    return Attainable(
        device="cpu",
        flops_per_s=rates,
        bytes_per_s=bandwidth,
        source=(
            f"measured on this CPU with {threads} intra-op thread{'s' if threads != 1 else ''}: "
            f"median of repeated {'/'.join(f'{MATMUL_N[d]}x{MATMUL_N[d]} {d}' for d in MATMUL_N if d in rates)} "
            f"matmuls, a 32->64 channel 3x3 convolution and {COPY_BYTES >> 20} MiB copies"
        ),
    )
