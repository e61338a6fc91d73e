"""The real cost of each planted mistake of ``examples/unlisted``: the script against its
hand-fixed version (``--fixed``), as whole processes, rounds alternated (the order shuffled per
round), each process reporting the median of its own steps after five warm-up steps. The
per-round ratio (mistake / fixed) decides; printed with its median and range.

    python benchmarks/bench_unlisted_ab.py                 # every case, 5 rounds
    python benchmarks/bench_unlisted_ab.py --rounds 7 --cases gc_every_step.py --json ab.json

Each run has the case's environment (one intra-op thread unless the case is about threads).
The last line is the headline: the median gain over the planted mistakes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from unlisted_cases import CASES, Case


def one_run(case: Case, fixed: bool, steps: int, timeout: float) -> float:
    """Median step (ms) of one process of ``case`` (``--fixed`` when ``fixed``)."""
    env = {**os.environ, "TD_AB_TIMING": "1", **dict(case.env)}
    if not case.env:
        env.pop("OMP_NUM_THREADS", None)
    cmd = [sys.executable, str(case.path), "--steps", str(steps), *(["--fixed"] if fixed else [])]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=case.path.parent
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{case.script}: {proc.stderr[-500:]}")
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith('{"median_step_ms"')][-1]
    return float(json.loads(line)["median_step_ms"])


def ab(case: Case, rounds: int, steps: int, timeout: float, rng: random.Random) -> dict[str, Any]:
    """Interleaved rounds: the mistake's and the fixed script's medians, the per-round ratios."""
    mistake, fixed, ratios = [], [], []
    for _ in range(rounds):
        order = [False, True]
        rng.shuffle(order)
        got = {f: one_run(case, f, steps, timeout) for f in order}
        mistake.append(got[False])
        fixed.append(got[True])
        ratios.append(got[False] / got[True])
    return {
        "script": case.script,
        "mistake": case.mistake or "(healthy control)",
        "mistake_ms": round(median(mistake), 3),
        "fixed_ms": round(median(fixed), 3),
        "gain": round(median(ratios), 3),
        "gain_min": round(min(ratios), 3),
        "gain_max": round(max(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--cases", nargs="*", default=None)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = random.Random(args.seed)
    cases = [c for c in CASES if not c.control and (args.cases is None or c.script in args.cases)]
    rows = []
    print(
        f"{'script':<26} {'mistake ms':>10} {'fixed ms':>9} {'gain':>6}  range (per-round ratios)"
    )
    for case in cases:
        row = ab(case, args.rounds, args.steps, args.timeout, rng)
        rows.append(row)
        print(
            f"{row['script']:<26} {row['mistake_ms']:>10.1f} {row['fixed_ms']:>9.1f} "
            f"{row['gain']:>5.2f}x  {row['gain_min']:.2f}-{row['gain_max']:.2f}",
            flush=True,
        )
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    gains = [r["gain"] for r in rows]
    if gains:
        print(
            f"median gain of fixing the planted mistake: {median(gains):.2f}x over {len(gains)} cases"
        )


if __name__ == "__main__":
    main()
