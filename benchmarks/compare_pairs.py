"""Is ``compare`` ever confidently wrong? Before/after pairs with known real gains.

For each pair in ``benchmarks/compare_pairs/`` (BASE ``*_a.py``, NEW ``*_b.py``):

1. **known gain**: whole runs of ``python SCRIPT`` (no torchdoctor at all), interleaved A B A B
   in shuffled order; the speed-up is the Wilcoxon signed-rank interval of the per-round ratios
   of wall time (what the user pays for the whole job);
2. **single runs**: ``torchdoctor check`` on BASE, then on NEW (as a CI job does), ``--reps``
   times, each pair compared on its own: one run a side;
3. **several runs**: the same check runs, all of them a side (``compare A1..A4 -- B1..B4``);
4. **--rerun**: ``torchdoctor compare --rerun A B --job-steps N``: each run stops after 5 + 20
   steps, and the time to the job's N steps is its one-time cost (process start-up included)
   plus N mean steps; the compile-cost pair runs its whole 20-step job (``--full``).

A verdict is *wrong* when it is decided ("NEW is ...", beyond the noise) in the direction the
known gain's interval excludes (or "no change" against a known change). The rerun *recovers*
the gain when its interval holds the known gain's point estimate.

    python benchmarks/compare_pairs.py [--pairs same,monitor,double,autotune,workers] [--reps 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PAIRS = HERE / "compare_pairs"
SRC = HERE.parent / "src"
sys.path.insert(0, str(SRC))

from torchdoctor import stats  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(SRC)}
ROUNDS = {"same": 8, "monitor": 8}  # the others' BASE runs take 10-17 s: six rounds, the fewest
JOB_STEPS = {"same": 2500, "monitor": 1800, "double": 400, "workers": 600, "autotune": 20}
"""Each pair's job length (its scripts' default). The rerun stops after 5 + 20 steps and gives
the time to this many steps from the one-time cost and the mean step; the compile-cost pair's
job is short enough to run whole (``--full``)."""


@dataclass
class Row:
    pair: str
    known: stats.RatioInterval
    singles: list[dict[str, Any]]
    multi: dict[str, Any]
    rerun: dict[str, Any]


def _wall(script: Path) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, str(script)], check=True, env=ENV, capture_output=True)
    return time.perf_counter() - t


def known_gain(a: Path, b: Path, rounds: int, seed: int) -> stats.RatioInterval:
    """Speed-up of NEW over BASE on whole plain runs, interleaved, shuffled per round."""
    shuffle = random.Random(seed)
    wa, wb = [], []
    for _ in range(rounds):
        order = [("a", a), ("b", b)]
        shuffle.shuffle(order)
        got = {name: _wall(p) for name, p in order}
        wa.append(got["a"])
        wb.append(got["b"])
    return stats.paired_ratio_interval(wa, wb)


def _check(script: Path, out: Path) -> Path:
    cmd = [sys.executable, "-m", "torchdoctor", "check", "--out", str(out), str(script)]
    subprocess.run(cmd, check=True, env=ENV, capture_output=True)
    return next(d for d in out.iterdir() if (d / "run.json").is_file())


def _compare(*args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "torchdoctor", "compare", "--json", *args]
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout)


def _summary(doc: dict[str, Any]) -> dict[str, Any]:
    head = doc["costs"][doc["headline"]]
    return {
        "verdict": doc["verdict"],
        "direction": doc["direction"],
        "decided": doc["decided"],
        "headline": doc["headline"],
        "speedup": head["speedup"],
        "interval": head["interval"],
    }


def wrong(known: stats.RatioInterval, s: dict[str, Any]) -> bool:
    """Decided in a direction the known gain's interval excludes."""
    if not s["decided"]:
        return False
    if s["direction"] == "faster":
        return known.high <= 1.0
    if s["direction"] == "slower":
        return known.low >= 1.0
    return known.low > 1.02 or known.high < 1 / 1.02  # "no change" against a real change


def run_pair(name: str, reps: int, seed: int, tmp: Path) -> Row:
    a, b = PAIRS / f"{name}_a.py", PAIRS / f"{name}_b.py"
    rounds = ROUNDS.get(name, 6)
    known = known_gain(a, b, rounds, seed)
    print(f"[{name}] known gain {known}", file=sys.stderr, flush=True)
    runs_a, runs_b, singles = [], [], []
    for i in range(reps):
        ra = _check(a, tmp / f"{name}-a{i}")
        rb = _check(b, tmp / f"{name}-b{i}")
        runs_a.append(str(ra))
        runs_b.append(str(rb))
        singles.append(_summary(_compare(str(ra), str(rb))))
        print(f"[{name}] single {i}: {singles[-1]['verdict'][:110]}", file=sys.stderr, flush=True)
    multi = _summary(_compare(*runs_a, "--", *runs_b))
    print(f"[{name}] runs: {multi['verdict'][:110]}", file=sys.stderr, flush=True)
    job = ["--full"] if name == "autotune" else ["--job-steps", str(JOB_STEPS[name])]
    rr = _compare("--rerun", *job, "--rounds", "8", "--seed", str(seed), str(a), str(b))
    rerun = {**_summary(rr), "rounds": len(rr["orders"])}
    print(f"[{name}] rerun: {rerun['verdict'][:110]}", file=sys.stderr, flush=True)
    return Row(name, known, singles, multi, rerun)


def recovers(r: Row) -> bool:
    """The rerun's interval holds the known gain."""
    iv = r.rerun["interval"]
    return bool(iv) and iv[0] <= r.known.ratio <= iv[1]


def _iv(x: dict[str, Any]) -> str:
    iv = x["interval"]
    return f"{x['speedup']:.2f}x" + (f" [{iv[0]:.2f}-{iv[1]:.2f}]" if iv else " [?]")


def _word(s: dict[str, Any]) -> str:
    if s["direction"] in ("no change", "unclear"):
        return s["direction"]
    return ("is " if s["decided"] else "looks ") + s["direction"]


def table(rows: list[Row]) -> list[str]:
    out = [
        "| pair | known gain (whole job, plain runs) | single runs: verdicts | single runs: wrong | "
        "4 runs a side | --rerun (time to the job's N steps) | recovered |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        words = ", ".join(f"{_word(s)} {s['speedup']:.2f}x" for s in r.singles)
        bad = sum(wrong(r.known, s) for s in r.singles)
        recovered = recovers(r)
        out.append(
            f"| {r.pair} | {r.known} | {words} | {bad} of {len(r.singles)} | "
            f"{_word(r.multi)} {_iv(r.multi)}{' WRONG' if wrong(r.known, r.multi) else ''} | "
            f"{_word(r.rerun)} {_iv(r.rerun)} ({r.rerun['rounds']} rounds)"
            f"{' WRONG' if wrong(r.known, r.rerun) else ''} | {'yes' if recovered else 'NO'} |"
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default="same,monitor,double,autotune,workers")
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    started = time.time()
    load0 = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="td-pairs-") as tmp:
        for name in args.pairs.split(","):
            rows.append(run_pair(name, args.reps, args.seed, Path(tmp)))
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs; load {load0:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end; {time.time() - started:.0f} s"
    )
    print("\n".join(table(rows)))
    wrongs = sum(wrong(r.known, s) for r in rows for s in [*r.singles, r.multi, r.rerun])
    got = sum(recovers(r) for r in rows)
    print(f"wrong decided verdicts: {wrongs}; --rerun recovered {got} of {len(rows)} known gains")


if __name__ == "__main__":
    main()
