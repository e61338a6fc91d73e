"""``analyze`` of this checkout against an older commit's, interleaved: is it at least as fast?

    python benchmarks/bench_analyze_ab.py [--base e78f05f] [--this COMMIT] [--rounds 9]
        [--trace v100_ddp_compiled_rank1] [--no-helper] [--instructions]

The base commit's ``src/`` comes from ``git archive BASE src`` (and ``--this COMMIT``'s too; by
default "this" is the checkout's ``src/`` as it is, uncommitted changes included); both trees are compiled to
bytecode in temporary copies (``bench_common.compile_bytecode``) and run by the same interpreter
and console script. Each round runs, in an order shuffled per round, four whole processes:
``torchdoctor analyze --json TRACE`` and ``torchdoctor --help`` (start-up: the interpreter, click
and the CLI's imports) for each tree. The decision is on the per-round ratios this / base (below
1: this checkout is faster), reported as their median with the lowest and highest round; a
shared machine's load moves the times of both arms of a round together, so the ratios are far
steadier than the times. The last line is the headline.

``--instructions`` counts instead of timing: each of the four commands runs once under
valgrind's callgrind (the loader's helper off) and the ratios are of instructions executed, which
the machine's load does not move (two runs of one command differ by about 0.1%). It takes a
minute or more a command, and does not see what the helper process or the cache hierarchy do.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_common import (
    REPO,
    TRACES,
    Run,
    compile_bytecode,
    environment,
    print_table,
    run_child,
    torchdoctor_cmd,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="e78f05f", help="the commit to compare with")
    ap.add_argument("--this", default=None, help="a commit to measure instead of the checkout")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--trace", default="v100_ddp_compiled_rank1")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument(
        "--no-helper",
        action="store_true",
        help="load in one process (TORCHDOCTOR_PARALLEL_LOAD=0): on a machine whose load moves, "
        "the helper starts in some rounds and not in others, which widens the rounds' spread",
    )
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions with valgrind's callgrind (one run per arm) instead of timing",
    )
    args = ap.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind on PATH")
    if args.no_helper or args.instructions:
        os.environ["TORCHDOCTOR_PARALLEL_LOAD"] = "0"  # the children inherit it
    trace = TRACES / f"{args.trace}.json.gz"
    if not trace.is_file():
        sys.exit(f"{trace} not found (set TORCHDOCTOR_TRACES)")
    print(environment() + ("; loader helper off" if args.no_helper else ""))
    with tempfile.TemporaryDirectory(prefix="td-ab-") as tmp:
        base_src = _archive(args.base, Path(tmp) / "base")
        if args.this:
            this_src: Path | None = _archive(args.this, Path(tmp) / "this")
            this = f"{args.this} ({_git('rev-parse', '--short', args.this)})"
        else:
            this_src = None
            dirty = _git("status", "--porcelain", "--", "src")
            this = f"{REPO / 'src'} at {_git('rev-parse', '--short', 'HEAD')}" + (
                " with uncommitted changes" if dirty else ""
            )
        print(f"this: {this}; base: {args.base} ({_git('rev-parse', '--short', args.base)})")
        print(compile_bytecode(base_src, *([this_src] if this_src else [])))
        arms = {
            ("analyze", "this"): [*torchdoctor_cmd(this_src), "analyze", "--json", str(trace)],
            ("analyze", "base"): [*torchdoctor_cmd(base_src), "analyze", "--json", str(trace)],
            ("start-up", "this"): [*torchdoctor_cmd(this_src), "--help"],
            ("start-up", "base"): [*torchdoctor_cmd(base_src), "--help"],
        }
        if args.instructions:
            _instructions(arms, args.trace, args.base, args.timeout)
            return
        rounds = _rounds(arms, args.rounds, args.timeout)
    _report(rounds, args.trace, args.base, args.this or "this checkout")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    _headline(rounds, args.trace, args.base)


def _git(*argv: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *argv], capture_output=True, text=True, check=True
    ).stdout.strip()


def _archive(commit: str, into: Path) -> Path:
    """``src/`` of ``commit``, extracted under ``into``."""
    into.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "src"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        sys.exit(f"git archive {commit} src: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


Arm = tuple[str, str]


def _rounds(arms: dict[Arm, list[str]], n: int, timeout: float) -> list[dict[Arm, Run]]:
    rng = random.Random(0)
    out = []
    for k in range(n):
        order = list(arms)
        rng.shuffle(order)
        got: dict[Arm, Run] = {}
        for arm in order:
            run = run_child(arms[arm], timeout)
            if run.status != 0:
                sys.exit(f"{arm} failed: {run.stderr.strip().splitlines()[-1:]}")
            got[arm] = run
        out.append(got)
        a = got[("analyze", "this")].wall_s / got[("analyze", "base")].wall_s
        s = got[("start-up", "this")].wall_s / got[("start-up", "base")].wall_s
        print(f"round {k + 1}: analyze this/base {a:.3f}, start-up {s:.3f}", flush=True)
    return out


_COLLECTED = re.compile(r"Collected : (\d+)")


def _instructions(arms: dict[Arm, list[str]], trace: str, base: str, timeout: float) -> None:
    """One callgrind run per arm: instructions executed, and this / base per command."""
    counts: dict[Arm, int] = {}
    for arm, cmd in arms.items():
        grind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        run = run_child(
            [*cmd[:2], *grind, *cmd[2:]] if cmd[0] == "env" else [*grind, *cmd], timeout
        )
        found = _COLLECTED.findall(run.stderr)
        if run.status != 0 or not found:
            sys.exit(f"{arm} under callgrind failed: {run.stderr.strip().splitlines()[-1:]}")
        counts[arm] = int(found[-1])
        print(f"{arm[0]}, {arm[1]}: {counts[arm] / 1e6:.1f}M instructions", flush=True)
    for what in ("analyze", "start-up"):
        r = counts[(what, "this")] / counts[(what, "base")]
        print(f"headline {trace}: {what} this/{base} = {r:.4f}x instructions (callgrind)")


def _ratios(rounds: list[dict[Arm, Run]], what: str, attr: str) -> list[float]:
    return sorted(
        getattr(r[(what, "this")], attr) / getattr(r[(what, "base")], attr) for r in rounds
    )


def _report(rounds: list[dict[Arm, Run]], trace: str, base: str, this: str) -> None:
    rows = []
    for what in ("analyze", "start-up"):
        for side in ("base", "this"):
            wall = statistics.median(r[(what, side)].wall_s for r in rounds)
            cpu = statistics.median(r[(what, side)].cpu_s for r in rounds)
            name = f"{what}, {base if side == 'base' else this}"
            rows.append([name, f"{wall:.3f}", f"{cpu:.3f}"])
        for attr, label in (("wall_s", "wall"), ("cpu_s", "CPU")):
            r = _ratios(rounds, what, attr)
            rows.append(
                [
                    f"{what} this/base, {label}",
                    f"{statistics.median(r):.3f}",
                    f"{r[0]:.3f}-{r[-1]:.3f}",
                ]
            )
    print(
        f"\n{trace}, medians of {len(rounds)} interleaved rounds (seconds; ratios: median, range):"
    )
    print_table(["arm", "wall s | ratio", "CPU s | range"], rows)


def _headline(rounds: list[dict[Arm, Run]], trace: str, base: str) -> None:
    a, ac = _ratios(rounds, "analyze", "wall_s"), _ratios(rounds, "analyze", "cpu_s")
    s = _ratios(rounds, "start-up", "wall_s")
    print(
        f"headline {trace}: analyze this/{base} = {statistics.median(a):.3f}x wall (rounds "
        f"{a[0]:.3f}-{a[-1]:.3f}), {statistics.median(ac):.3f}x CPU (rounds {ac[0]:.3f}-"
        f"{ac[-1]:.3f}); start-up {statistics.median(s):.3f}x wall (rounds {s[0]:.3f}-{s[-1]:.3f})"
    )


if __name__ == "__main__":
    main()
