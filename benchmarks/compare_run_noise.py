"""How far apart two runs of the same code land on this machine: the run-to-run allowance that
``compare`` adds to the interval of one run a side (``--run-noise``).

Runs each script many times, one fresh process after another (what a user does when they run
``check`` on BASE, then on NEW), each under ``check``'s step clock with the profiler off, and
reports the ratio of mean steps between runs made back to back (lag 1) and further apart. The
allowance is the 95th percentile of ``max(r, 1/r)`` over those ratios, minus one.

    python benchmarks/compare_run_noise.py [--runs 16] [SCRIPT ...]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT = [HERE / "compare_pairs" / "same_a.py", HERE / "compare_pairs" / "double_a.py"]


def _means(script: Path, runs: int, warmup: int, steps: int) -> list[float]:
    from torchdoctor.compare.rerun import RerunOptions, Script, run_interleaved

    s = Script(str(script))
    # The same script on both sides: the rounds are just runs one after another.
    opts = RerunOptions(rounds=runs // 2, warmup=warmup, steps=steps, min_rounds=runs)
    r = run_interleaved(s, s, opts)
    return [c.cost.mean_ms for c in r.runs if c.cost is not None]


def _spread(means: list[float], lag: int) -> np.ndarray:
    m = np.asarray(means)
    r = m[lag:] / m[:-lag]
    return np.maximum(r, 1.0 / r)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scripts", nargs="*", type=Path, default=DEFAULT)
    p.add_argument("--runs", type=int, default=16)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(
        f"{'script':<16} {'runs':>4} {'mean step ms (min-max)':>24} {'lag':>4} {'p50':>6} {'p95':>6} {'max':>6}"
    )
    worst = []
    for script in args.scripts:
        means = _means(script, args.runs, args.warmup, args.steps)
        rng = f"{min(means):.2f}-{max(means):.2f}"
        for lag in (1, 2, 4):
            if len(means) <= lag:
                continue
            s = _spread(means, lag)
            p50, p95 = np.quantile(s, [0.5, 0.95])
            worst.append(float(p95))
            print(
                f"{script.name:<16} {len(means):>4} {rng:>24} {lag:>4} {p50:6.2f} {p95:6.2f} {s.max():6.2f}"
            )
    allowance = (max(worst) - 1.0) * 100.0 if worst else math.nan
    print(
        f"run-to-run allowance (95th percentile of the run ratio, worst lag): +/-{allowance:.0f}%"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent / "src"))
    main()
