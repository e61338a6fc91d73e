"""Where kernel-to-kernel latency ends: the idle gaps in which the next work was already queued.

Usage: python benchmarks/bench_queued_gaps.py   (reads the corpus from $TORCHDOCTOR_TRACES)

For every GPU trace of the corpus, each device-idle gap in the steps whose next work was launched
before the gap ended has a queued part (from the later of the gap's start and that launch, to the
gap's end). The table shows their distribution; the last line the widest queued gap at or under
the threshold and the narrowest above it, which is why ``KERNEL_LATENCY_US`` sits where it does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_common import TRACES

from torchdoctor.analysis.bundle import analyze_table
from torchdoctor.analysis.waits import idle_gaps
from torchdoctor.rules.thresholds import KERNEL_LATENCY_US
from torchdoctor.trace.load import load_trace


def queued_parts_us(path: Path) -> np.ndarray:
    """The queued part of each idle gap (µs), for gaps that have one."""
    a = analyze_table(load_trace(path))
    act = a.activity
    if not len(act.rows):
        return np.zeros(0)
    g0, g1 = idle_gaps(a.steps, act)
    k = np.searchsorted(act.start_us, g1, side="left")
    ok = k < len(act.start_us)
    launch = np.full(len(g0), np.inf)
    launch[ok] = np.nan_to_num(act.launch_us[k[ok]], nan=np.inf)
    q = g1 - np.maximum(g0, launch)
    return q[q > 0]


def main() -> None:
    below, above = 0.0, np.inf
    print(
        f"{'trace':<34} {'gaps':>6} {'p50':>6} {'p99':>6} {'<=T max':>8} {'>T min':>9} {'>T n':>5}"
    )
    for path in sorted(TRACES.glob("*.json.gz")):
        q = queued_parts_us(path)
        if not len(q):
            continue
        lo, hi = q[q <= KERNEL_LATENCY_US], q[q > KERNEL_LATENCY_US]
        p50, p99 = np.percentile(q, [50, 99])
        lo_max = float(lo.max()) if len(lo) else 0.0
        hi_min = float(hi.min()) if len(hi) else float("inf")
        below, above = max(below, lo_max), min(above, hi_min)
        name = path.name.removesuffix(".json.gz")
        print(
            f"{name:<34} {len(q):>6} {p50:>6.1f} {p99:>6.1f} {lo_max:>8.1f} {hi_min:>9.1f} "
            f"{len(hi):>5}"
        )
    print(
        f"threshold {float(KERNEL_LATENCY_US):.0f} us: widest latency gap {below:.1f} us, "
        f"narrowest dependency wait {above:.1f} us"
    )


if __name__ == "__main__":
    main()
