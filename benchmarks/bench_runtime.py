"""Runtime overhead: the same CPU training step written three ways, timed in one interleaved run.

Workloads: an MLP and a small CNN, fp32, eager, AdamW, batches already in memory. Variants:
a hand-written loop, the torchdoctor runtime, and Lightning Fabric with the same settings
(skipped, with a note, when ``lightning`` is not installed: it is not a project dependency).

Each round runs every variant for ``--steps`` steps in a shuffled order, so a slow spell on a
busy machine hits all of them; each step is timed with the host clock (the CPU is synchronous).
The overhead is the median over rounds of each round's median-step ratio.

    python benchmarks/bench_runtime.py [--rounds 15] [--steps 30] [--markdown]
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import torchdoctor as td

Batch = tuple[torch.Tensor, torch.Tensor]
StepRunner = Callable[[list[Batch]], list[float]]


@dataclass(frozen=True)
class Workload:
    """A model factory and its in-memory batches."""

    name: str
    make_model: Callable[[], nn.Module]
    batches: list[Batch]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )


def cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 10),
    )  # fmt: skip


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(4, 2)


def workloads(steps: int) -> list[Workload]:
    g = torch.Generator().manual_seed(0)

    def data(shape: tuple[int, ...], classes: int) -> list[Batch]:
        return [
            (torch.randn(*shape, generator=g), torch.randint(0, classes, (shape[0],), generator=g))
            for _ in range(steps)
        ]

    return [
        Workload("MLP 512-1024-1024-10, batch 128", mlp, data((128, 512), 10)),
        Workload("CNN 2 conv + fc, batch 32x3x32x32", cnn, data((32, 3, 32, 32), 10)),
        # A step that does almost nothing: what remains is the per-step cost of each wrapper.
        Workload("Linear 4-2, batch 2 (overhead floor)", tiny, data((2, 4), 2)),
    ]


def hand_written(make_model: Callable[[], nn.Module]) -> StepRunner:
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def run(batches: list[Batch]) -> list[float]:
        times = []
        for x, y in batches:
            t0 = time.perf_counter()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
        return times

    return run


def runtime(make_model: Callable[[], nn.Module]) -> StepRunner:
    rt = td.Runtime(precision="fp32", compile="off", device="cpu")
    model = make_model()
    model, opt = rt.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-3))

    def run(batches: list[Batch]) -> list[float]:
        times = []
        it = iter(rt.prefetcher(batches))  # what rt.loader iterates: batch counting for the meter
        while True:
            t0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            with rt.autocast():
                loss = F.cross_entropy(model(x), y)
            rt.backward(loss)
            rt.step(opt)
            times.append(time.perf_counter() - t0)
        return times

    return run


def fabric(make_model: Callable[[], nn.Module]) -> StepRunner | None:
    try:
        from lightning.fabric import Fabric
    except ImportError:
        return None
    logging.getLogger("lightning.fabric").setLevel(logging.WARNING)
    fab = Fabric(accelerator="cpu", devices=1, precision="32-true")
    model = make_model()
    model, opt = fab.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-3))

    def run(batches: list[Batch]) -> list[float]:
        times = []
        for x, y in batches:
            t0 = time.perf_counter()
            loss = F.cross_entropy(model(x), y)
            fab.backward(loss)
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
        return times

    return run


@dataclass(frozen=True)
class Result:
    """One variant's timings on one workload."""

    median_ms: float
    """Median step time over all timed steps, in ms."""
    iqr_ms: float
    """Interquartile range of the step times, in ms."""
    ratio: float | None
    """Median over rounds of (this variant's round median / the hand-written round median)."""
    extra_us: float
    """Median over rounds of (this variant's round median - the hand-written one), in µs."""


def measure(w: Workload, rounds: int, seed: int) -> dict[str, Result]:
    """Interleaved rounds of every variant on ``w``; returns per-variant results."""
    runners: dict[str, StepRunner] = {
        "hand-written": hand_written(w.make_model),
        "torchdoctor": runtime(w.make_model),
    }
    fab = fabric(w.make_model)
    if fab is not None:
        runners["Fabric"] = fab
    for run in runners.values():  # warm-up: allocator, first-touch, the runtime's FLOP count
        run(w.batches[:5])
    rng = random.Random(seed)
    times: dict[str, list[float]] = {k: [] for k in runners}
    round_medians: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(rounds):
        order = list(runners)
        rng.shuffle(order)
        for name in order:
            t = runners[name](w.batches)
            times[name] += t
            round_medians[name].append(statistics.median(t))
    out = {}
    for name, t in times.items():
        q1, _, q3 = statistics.quantiles(t, n=4)
        ratios = [
            a / b for a, b in zip(round_medians[name], round_medians["hand-written"], strict=True)
        ]
        diffs = [
            a - b for a, b in zip(round_medians[name], round_medians["hand-written"], strict=True)
        ]
        out[name] = Result(
            statistics.median(t) * 1e3,
            (q3 - q1) * 1e3,
            statistics.median(ratios),
            statistics.median(diffs) * 1e6,
        )
    return out


def per_call_costs(repeat: int = 15, number: int = 2000) -> dict[str, float]:
    """Microseconds per call of each piece the runtime adds to a step (median of ``repeat``)."""
    import timeit

    rt = td.Runtime(precision="fp32", device="cpu")
    model = tiny()
    wrapped = rt.setup(tiny())
    x = torch.randn(2, 4)
    batch = (x, torch.zeros(2, dtype=torch.long))

    def autocast() -> None:
        with rt.autocast():
            pass

    def median_us(fn: Callable[[], object]) -> float:
        return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6

    class NoOp:
        """Stands in for a loss and an optimizer, so only the runtime's own work is timed."""

        def backward(self) -> None:
            pass

        def step(self) -> None:
            pass

        def zero_grad(self, set_to_none: bool = True) -> None:
            pass

    noop = NoOp()

    def bare() -> None:
        noop.backward()
        noop.step()
        noop.zero_grad()

    def through_rt() -> None:
        rt.backward(noop)  # type: ignore[arg-type]
        rt.step(noop)  # type: ignore[arg-type]

    plain, through = median_us(lambda: model(x)), median_us(lambda: wrapped(x))
    return {
        "model call (wrapper minus plain module)": through - plain,
        "rt.autocast() enter+exit (fp32)": median_us(autocast),
        "batch count (prefetcher hook)": median_us(lambda: rt._count_batch(batch)),
        "rt.backward + rt.step bookkeeping, meter included": median_us(through_rt)
        - median_us(bare),
    }


def _pct(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{100 * (ratio - 1):+.2f}%"


def render(results: dict[str, dict[str, Result]], markdown: bool) -> str:
    rows = []
    for wname, res in results.items():
        for name, r in res.items():
            rows.append(
                (
                    wname,
                    name,
                    f"{r.median_ms:.3f}",
                    f"{r.iqr_ms:.3f}",
                    _pct(r.ratio),
                    f"{r.extra_us:+.1f}",
                )
            )
    head = ("workload", "variant", "median step ms", "IQR ms", "vs hand-written", "extra µs/step")
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*r) for r in [head, *rows])


def headline(results: dict[str, dict[str, Result]]) -> str:
    parts = []
    for wname, res in results.items():
        rt = res["torchdoctor"].ratio or 1.0
        vs_fabric = (
            "Fabric skipped"
            if "Fabric" not in res
            else f"{_pct(rt / (res['Fabric'].ratio or 1.0))} vs Fabric"
        )
        parts.append(f"{wname.split(',')[0]}: {_pct(rt)} vs hand-written, {vs_fabric}")
    return "runtime overhead (median of per-round ratios) - " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=30, help="steps per variant per round")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.getLogger("torchdoctor.runtime").setLevel(logging.WARNING)
    results = {w.name: measure(w, args.rounds, seed=i) for i, w in enumerate(workloads(args.steps))}
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds x {args.steps} steps per variant"
    )
    if not all("Fabric" in r for r in results.values()):
        print("Lightning Fabric skipped: `lightning` is not installed (pip install lightning)")
    print(render(results, args.markdown))
    costs = per_call_costs()
    print("per-call costs (µs): " + "; ".join(f"{k} {v:.2f}" for k, v in costs.items()))
    print(f"sum of the runtime's per-step pieces: {sum(costs.values()):.1f} µs")
    print(headline(results))


if __name__ == "__main__":
    main()
