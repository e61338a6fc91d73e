"""How much ``check``'s instruments change the step they measure, and whether the step ``check``
reports is the step the script runs without them, for a small-op model and a compute-bound
one on this machine.

Part 1, in this process, interleaved (order shuffled every round, >= 5 rounds): each arm runs
a few steps and gives its median; the per-round ratio to ``plain`` is the instrument's cost.

- ``plain``: nothing but the loop;
- ``profiler``: torch.profiler recording CPU operators, as in ``check``'s profiled window;
- ``sampler``: torchdoctor's line sampler alone;
- ``profiled window``: both, as ``check`` runs its profiled window.

Part 2, whole processes, interleaved: the same script run plain (it prints its own median step)
and under ``torchdoctor check`` (the report's step: ``probe_effect.clean_ms``); the per-round
ratio is check's reported step over the script's own.

    python benchmarks/bench_probe_effect.py [--rounds 7] [--steps 8] [--check-rounds 5]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from statistics import median

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from torchdoctor import stats
from torchdoctor.capture.kineto_quiet import kineto_quiet
from torchdoctor.capture.sampler import StackSampler

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, sys, time
import torch
from torch import nn

torch.set_num_threads(1)
kind, steps = sys.argv[1], int(sys.argv[2])
if kind == "small":
    model = nn.Sequential(*[nn.Linear(16, 16) for _ in range(40)])
    x = torch.randn(8, 16)
else:
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
    x = torch.randn(256, 1024)
opt = torch.optim.Adam(model.parameters())
times = []
for _ in range(steps):
    t0 = time.perf_counter()
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
    times.append((time.perf_counter() - t0) * 1e3)
print("BENCH_RESULT " + json.dumps({"median_ms": sorted(times[5:])[len(times[5:]) // 2]}))
"""


def small_ops() -> Callable[[], None]:
    m = nn.Sequential(*[nn.Linear(16, 16) for _ in range(40)])
    opt = torch.optim.Adam(m.parameters())
    x = torch.randn(8, 16)

    def step() -> None:
        m(x).square().mean().backward()
        opt.step()
        opt.zero_grad()

    return step


def compute_bound() -> Callable[[], None]:
    m = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
    opt = torch.optim.Adam(m.parameters())
    x = torch.randn(256, 1024)

    def step() -> None:
        m(x).square().mean().backward()
        opt.step()
        opt.zero_grad()

    return step


WORKLOADS = {"small": ("small-op MLP 40x16", small_ops), "compute": ("2x1024 MLP", compute_bound)}
ARMS = ("plain", "profiler", "sampler", "profiled window")


def run_arm(arm: str, step: Callable[[], None], steps: int) -> float:
    """Median step (ms) of ``steps`` steps under ``arm``."""
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof = (
            profile(activities=[ProfilerActivity.CPU])
            if arm in ("profiler", "profiled window")
            else None
        )
        sampler = StackSampler() if arm in ("sampler", "profiled window") else None
        if prof is not None:
            with kineto_quiet():  # Kineto's own progress lines, off the table
                prof.__enter__()
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
            if prof is not None:
                with kineto_quiet():
                    prof.__exit__(None, None, None)
    return median(times) * 1e3


def interval(num: list[float], den: list[float]) -> str:
    """The typical per-round ratio with its 90% interval (5 rounds reach 94%)."""
    iv = stats.paired_ratio_interval(num, den, confidence=0.9)
    return f"{iv.ratio:.2f}x [{iv.low:.2f}-{iv.high:.2f}]"


def part1(rounds: int, steps: int, rng: random.Random) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    for key, (_, build) in WORKLOADS.items():
        step = build()
        for _ in range(3):
            step()
        got: dict[str, list[float]] = {a: [] for a in ARMS}
        for _ in range(rounds):
            order = list(ARMS)
            rng.shuffle(order)
            for arm in order:
                got[arm].append(run_arm(arm, step, steps))
        out[key] = got
    return out


def _child(cmd: list[str], timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)


def part2(rounds: int, rng: random.Random) -> dict[str, tuple[list[float], list[float]]]:
    """Per model: (check's reported step, the script's own) per round, interleaved."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "loop.py"
        script.write_text(SCRIPT)
        for key in WORKLOADS:
            reported: list[float] = []
            own: list[float] = []
            for r in range(rounds):
                arms = ["plain", "check"]
                rng.shuffle(arms)
                for arm in arms:
                    if arm == "plain":
                        done = _child([sys.executable, str(script), key, "60"])
                        line = next(
                            ln for ln in done.stdout.splitlines() if ln.startswith("BENCH_RESULT")
                        )
                        own.append(json.loads(line.split(" ", 1)[1])["median_ms"])
                    else:
                        out_dir = Path(tmp) / f"runs-{key}-{r}"
                        cmd = [sys.executable, "-m", "torchdoctor", "check", "--out", str(out_dir)]
                        _child([*cmd, str(script), key, "60"])
                        (report,) = out_dir.glob("*/report.json")
                        doc = json.loads(report.read_text())
                        reported.append(float(doc["probe_effect"]["clean_ms"]))
            out[key] = (reported, own)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--check-rounds", type=int, default=5)
    args = p.parse_args()
    if args.rounds < 5 or args.check_rounds < 5:
        p.error("at least 5 rounds: fewer give no interval at 95%")
    torch.set_num_threads(1)
    rng = random.Random(0)
    print(
        f"torch {torch.__version__}, 1 intra-op thread, {args.rounds} rounds x {args.steps} "
        f"steps per arm; check: {args.check_rounds} rounds"
    )
    one = part1(args.rounds, args.steps, rng)
    print(f"{'model':<20} {'plain ms':>9} " + " ".join(f"{a:>20}" for a in ARMS[1:]))
    for key, got in one.items():
        cells = [interval(got[a], got["plain"]) for a in ARMS[1:]]
        print(
            f"{WORKLOADS[key][0]:<20} {median(got['plain']):>9.2f} "
            + " ".join(f"{c:>20}" for c in cells)
        )
    two = part2(args.check_rounds, rng)
    print(f"{'model':<20} {'own ms':>9} {'reported ms':>12} {'reported / own':>22}")
    heads = []
    for key, (reported, own) in two.items():
        iv = interval(reported, own)
        heads.append(f"{WORKLOADS[key][0]} {iv}")
        print(f"{WORKLOADS[key][0]:<20} {median(own):>9.2f} {median(reported):>12.2f} {iv:>22}")
    windows = ", ".join(
        f"{WORKLOADS[k][0]} {interval(g['profiled window'], g['plain'])}" for k, g in one.items()
    )
    print(
        f"check's reported step over the script's own: {'; '.join(heads)} (profiled window over plain: {windows})"
    )


if __name__ == "__main__":
    main()
