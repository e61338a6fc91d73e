"""Is ``compare`` ever confidently wrong? Before/after pairs with known real gains.

For each pair in ``benchmarks/compare_pairs/`` (BASE ``*_a.py``, NEW ``*_b.py``):

1. **--rerun and the known gain, in the same rounds.** ``run_interleaved`` (what ``compare
   --rerun`` runs) with the job's length: each run stops after 5 + 20 steps, and the time to the
   job's N steps is its one-time cost (process start-up included) plus N mean steps; the
   compile-cost pair runs its whole 20-step job (``--full``). After each of its rounds the
   harness runs both scripts whole with plain ``python SCRIPT`` (no torchdoctor at all), in
   shuffled order: the **known gain** is the Wilcoxon signed-rank interval of those per-round
   wall-time ratios (what the user pays for the whole job), measured in the same minutes as the
   rerun's estimate, since the gain itself moves with the machine's load;
2. **single runs**: ``torchdoctor check`` on BASE, then on NEW (as a CI job does), ``--reps``
   times, each pair compared on its own: one run a side;
3. **several runs**: the same check runs, all of them a side (``compare A1..A4 -- B1..B4``).

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
ROUNDS = {"autotune": 6}  # its BASE runs take 15 s and more: six rounds, the fewest decisive
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


def rerun_and_known(
    a: Path, b: Path, name: str, rounds: int, seed: int
) -> tuple[dict[str, Any], stats.RatioInterval]:
    """The rerun's verdict and, from plain whole runs after each of its rounds, the known gain."""
    from torchdoctor.compare.render import verdict_dict
    from torchdoctor.compare.rerun import ChildRun, RerunOptions, Script, run_interleaved

    shuffle = random.Random(seed + 1)
    walls: dict[str, list[float]] = {"a": [], "b": []}
    done: dict[int, int] = {}
    first: list[str] = []

    def after(run: ChildRun) -> None:
        done[run.round] = done.get(run.round, 0) + 1
        if done[run.round] == 2 and run.ok:  # both sides of this round: now the plain pair
            order = [("a", a), ("b", b)]
            if run.round % 2 == 0:  # a random order, reversed the next round (as the rerun does)
                shuffle.shuffle(order)
                first.append(order[0][0])
            elif first and first[-1] == "a":
                order.reverse()
            for side, path in order:
                walls[side].append(_wall(path))

    full = name == "autotune"
    opts = RerunOptions(
        rounds=rounds, seed=seed, full=full, job_steps=None if full else JOB_STEPS[name]
    )
    r = run_interleaved(
        Script(str(a)), Script(str(b)), opts, env={"PYTHONPATH": str(SRC)}, on_run=after
    )
    if r.verdict is None:
        raise RuntimeError(r.failure)
    n = min(len(walls["a"]), len(walls["b"]))
    known = stats.paired_ratio_interval(walls["a"][:n], walls["b"][:n])
    doc = verdict_dict(r.verdict, r.estimates, None)
    return {**_summary(doc), "rounds": len(r.rounds)}, known


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


def run_pair(name: str, reps: int, rounds: int, seed: int, tmp: Path) -> Row:
    a, b = PAIRS / f"{name}_a.py", PAIRS / f"{name}_b.py"
    rerun, known = rerun_and_known(a, b, name, min(rounds, ROUNDS.get(name, rounds)), seed)
    print(f"[{name}] known gain {known}", file=sys.stderr, flush=True)
    print(f"[{name}] rerun: {rerun['verdict'][:110]}", file=sys.stderr, flush=True)
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
        "| pair | known gain (whole job, plain runs in the rerun's rounds) | single runs: verdicts | "
        "single runs: wrong | 4 runs a side | --rerun (time to the job's N steps) | recovered |",
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


def _row_dict(r: Row) -> dict[str, Any]:
    known = {"ratio": r.known.ratio, "low": r.known.low, "high": r.known.high, "n": r.known.n}
    return {"pair": r.pair, "known": known, "singles": r.singles, "multi": r.multi,
            "rerun": r.rerun, "table_row": table([r])[-1]}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default="same,monitor,double,autotune,workers")
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--rounds", type=int, default=8, help="rerun rounds at most, per pair")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="append each pair's row to this file as it finishes (JSON lines)")
    args = p.parse_args()
    started = time.time()
    load0 = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="td-pairs-") as tmp:
        for name in args.pairs.split(","):
            rows.append(run_pair(name, args.reps, args.rounds, args.seed, Path(tmp)))
            if args.json:
                with open(args.json, "a", encoding="utf-8") as f:
                    f.write(json.dumps(_row_dict(rows[-1])) + "\n")
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
