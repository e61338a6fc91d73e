"""``torchdoctor tune`` against an exhaustive grid over the same space, measured the same way.

For every workload: run the tuner's search, then every configuration of the same (pruned) space
beside the baseline, interleaved round by round in one trial process (the way the tuner measures),
with the same fidelity gate; the grid's best is the faithful configuration with the highest
speed-up over the baseline. Then the tuner's pick and the grid's pick run side by side in a fresh
trial, and their per-round ratio's interval is the result (a single measurement can be lucky, and
the grid picks the luckiest of many).

    python benchmarks/bench_tune.py          # varlen_transformer.py, written after the search
    python benchmarks/bench_tune.py --workloads examples/workloads/slow_data.py

Goal: the tuner's pick within 3% of the grid's best, using at most 40% of the grid's trials.
The last line is the headline.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from torchdoctor import ab
from torchdoctor.tune import fidelity
from torchdoctor.tune.options import TuneOptions
from torchdoctor.tune.report import describe
from torchdoctor.tune.runner import TrialRunner
from torchdoctor.tune.search import Search, Settings
from torchdoctor.tune.space import Assignment, assignment_key
from torchdoctor.tune.trial import Trial

ROOT = Path(__file__).resolve().parent.parent
# The knobs searched per workload (tuner and grid alike): the ones its pipeline exposes, so the
# exhaustive grid stays affordable on a 2-CPU machine (27 + 36 + 36 configurations).
KNOBS = {
    "slow_data.py": ("num_workers", "persistent_workers", "prefetch_factor", "optimizer_impl"),
    "mlp_adamw.py": ("num_workers", "optimizer_impl", "compile", "precision"),
    "bf16_slower.py": ("num_workers", "optimizer_impl", "compile", "precision"),
    "varlen_transformer.py": ("num_workers", "optimizer_impl", "precision"),
}
WORKLOADS = [str(ROOT / "examples" / "workloads" / "varlen_transformer.py")]


def log(msg: str) -> None:
    """Progress to stderr (stdout holds the results)."""
    print(msg, file=sys.stderr, flush=True)


def run_grid(
    runner: TrialRunner, grid: list[Assignment], fidelity_steps: int, min_gain: float
) -> list[dict[str, Any]]:
    """Every configuration beside the baseline (interleaved rounds); the baseline's own trial
    gives the fidelity reference."""
    rows: list[dict[str, Any]] = []
    reference: list[float] = []
    for i, a in enumerate(grid):
        r = runner(Trial(assignment_key(a, 20), "baseline" if i == 0 else "single", a, 20))
        reference = reference or r.losses
        ok = (
            r.status == "ok"
            and fidelity.check(reference, r.losses, a["precision"], steps=fidelity_steps).ok
        )
        ri = None
        if r.status == "ok" and "baseline" in r.rounds_s:
            ri = ab.compare(r.rounds_s["baseline"], r.rounds_s["candidate"], min_gain).interval
        rows.append(
            {
                "config": describe(a),
                "assignment": a,
                "status": r.status,
                "faithful": ok,
                "speedup": 1.0 if i == 0 else (ri.ratio if ri else None),
                "interval": ri.format() if ri else ("1.00x" if i == 0 else ""),
                "wall_s": r.wall_s,
            }
        )
        log(f"  grid {i + 1}/{len(grid)} {describe(a)}: {r.status} {rows[-1]['interval']}")
    return rows


def head_to_head(runner: TrialRunner, tuned: Assignment, grid: Assignment, min_gain: float) -> Any:
    """The tuner's pick beside the grid's pick (and the baseline) in a fresh trial: the interval
    of grid step time / tuned step time per round (below 1: the tuner's pick is slower)."""
    r = runner(Trial(assignment_key(tuned, 30), "final", tuned, 30, reference=grid))
    ref = r.rounds_s.get("incumbent") or r.rounds_s.get("baseline")
    if r.status != "ok" or not ref:
        raise RuntimeError(f"head-to-head failed: {r.status} {r.reason}")
    return ab.compare(ref, r.rounds_s["candidate"], min_gain).interval


def run_tuner(runner: TrialRunner, args: argparse.Namespace, knobs: Any) -> tuple[Any, float]:
    """The tuner's search (no budget: it stops on its own); returns (summary, wall seconds)."""
    start = time.perf_counter()
    summary = Search(
        runner,
        Settings(min_gain=args.min_gain, fidelity_steps=args.fidelity_steps, knobs=knobs),
        on_record=lambda r: log(
            f"  tune {r.seq + 1} [{r.trial.phase}] {describe(r.trial.assignment)}: "
            f"{r.result.status} {r.comparison.interval.format() if r.comparison else ''}"
        ),
    ).run()
    return summary, time.perf_counter() - start


def bench(workload: str, args: argparse.Namespace) -> dict[str, Any]:
    """Tuner, interleaved grid and head-to-head on one workload."""
    knobs = None if args.knobs == ("all",) else (args.knobs or KNOBS.get(Path(workload).name))
    threads = str(args.threads)
    runner = TrialRunner(
        workload,
        TuneOptions(
            warmup=args.warmup,
            steps=args.steps,
            max_rounds=args.max_rounds,
            min_gain=args.min_gain,
            trial_timeout="900",
        ),
        workdir=args.workdir,
        # A shared inductor cache: compile trials after the first pay what a second run pays.
        env={
            "TORCHINDUCTOR_CACHE_DIR": str(Path(args.workdir) / "inductor-cache"),
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
        },
    )
    summary, tune_s = run_tuner(runner, args, knobs)
    grid = summary.space.grid()
    start = time.perf_counter()
    rows = run_grid(runner, grid, args.fidelity_steps, args.min_gain)
    grid_s = time.perf_counter() - start
    grid_best = max(
        (r for r in rows if r["faithful"] and r["speedup"] is not None), key=lambda r: r["speedup"]
    )
    tuned = summary.best.trial.assignment
    same = tuned == grid_best["assignment"]
    h2h = None if same else head_to_head(runner, tuned, grid_best["assignment"], args.min_gain)
    return {
        "workload": Path(workload).name,
        "knobs": [k.name for k in summary.space.knobs],
        "tuned": describe(tuned),
        "tuned_claim": summary.claim.format() if summary.claim else "1.00x",
        "grid_best": grid_best["config"],
        "grid_best_interval": grid_best["interval"],
        "same_pick": same,
        "tuned_vs_grid": h2h.format() if h2h else "same configuration",
        "tuned_vs_grid_ratio": h2h.ratio if h2h else 1.0,
        "tuned_vs_grid_low": h2h.low if h2h else 1.0,
        "tuner_trials": len(summary.records),
        "grid_trials": len(grid),
        "tune_wall_s": tune_s,
        "grid_wall_s": grid_s,
        "grid": [{k: v for k, v in r.items() if k != "assignment"} for r in rows],
        "rejected_in_grid": [
            r["config"] for r in rows if r["status"] == "ok" and not r["faithful"]
        ],
        "failed_in_grid": [f"{r['config']}: {r['status']}" for r in rows if r["status"] != "ok"],
    }


def main() -> None:
    """Run every workload, print one line each and the headline; write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", default=WORKLOADS)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--max-rounds", type=int, default=12)
    p.add_argument("--min-gain", type=float, default=0.02)
    p.add_argument("--fidelity-steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1, help="BLAS threads per trial process")
    p.add_argument(
        "--knobs",
        type=lambda s: tuple(s.split(",")),
        default=None,
        help="knobs for every workload (default: KNOBS per workload; 'all' for every knob)",
    )
    p.add_argument("--workdir", default=str(ROOT / "benchmarks" / "out" / "tune"))
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "bench_tune.json"))
    args = p.parse_args()
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    results = []
    for wl in args.workloads:
        log(f"== {wl}")
        res = bench(wl, args)
        results.append(res)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))  # kept if a later workload fails
        print(f"{res['workload']}: grid (each configuration beside the baseline):")
        for r in res["grid"]:
            print(
                f"  {r['config']:<55} {r['status']:<8} {r['interval']:<20} faithful={r['faithful']}"
            )
        print(
            f"{res['workload']}: tuned [{res['tuned']}] {res['tuned_claim']} | grid best "
            f"[{res['grid_best']}] {res['grid_best_interval']} | tuned vs grid best "
            f"{res['tuned_vs_grid']} | trials {res['tuner_trials']} vs {res['grid_trials']}",
            flush=True,
        )
    worst = min(r["tuned_vs_grid_ratio"] for r in results)
    share = sum(r["tuner_trials"] for r in results) / sum(r["grid_trials"] for r in results)
    print(
        f"headline: the tuner's pick runs at {worst:.3f}x the grid best's speed (interleaved, worst "
        f"workload), using {share:.0%} of the grid's trials "
        f"({sum(r['tuner_trials'] for r in results)} vs {sum(r['grid_trials'] for r in results)})"
    )


if __name__ == "__main__":
    main()
