"""A folder of many ranks: wall time and memory of ``analyze FOLDER`` (--jobs 1 / 2) and of HTA.

    python benchmarks/bench_ranks.py [--ranks 64] [--scaling 8,32,64] [--rounds 2]
                                     [--source a100_ddp_convnet_nccl] [--hta-mem-gb 6]

Builds the folder from one corpus trace: every rank is a copy with fresh correlation / External /
flow ids, its own rank in ``distributedInfo``, a per-rank jitter (time stretched by 0.98-1.02 and a
clock offset under 20 µs) and one rank (``--slow-rank``) stretched by ``--slow-factor``: all its
work takes longer, so it is the straggler to find. Every measurement is a whole process, run as a
user would; the arms alternate in each round (A B C, then B C A, ...). Peak memory is shown twice:
the largest single process (``wait4``) and the sum over the process tree (sampled every 50 ms),
since a pool's memory is its workers' together. HTA runs under an address-space limit.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from bench_common import (
    HTA_SCRIPT,
    TRACES,
    compile_bytecode,
    environment,
    fmt,
    hta_python,
    print_table,
)
from bench_large_trace import _max_id, _shifter

_PAGE = os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    args = _parse_args()
    hta = None if args.no_hta else hta_python(args.hta_python)
    print(environment())
    print(compile_bytecode())
    with tempfile.TemporaryDirectory(prefix="td-ranks-") as tmp:
        folder = Path(tmp) / "ranks"
        start = time.perf_counter()
        _build([sys.executable, __file__, "--build", str(folder), *_build_args(args)])
        print(f"built {args.ranks} ranks in {time.perf_counter() - start:.0f} s", flush=True)
        rows = _headline(folder, hta, args)
        scaling = _scaling(folder, Path(tmp), args)
    _report(rows, scaling, args)


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--scaling", default="8,32,64", help="rank counts for the memory table")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds (medians shown)")
    ap.add_argument("--source", default="a100_ddp_convnet_nccl", help="corpus trace to copy")
    ap.add_argument("--slow-rank", type=int, default=5)
    ap.add_argument("--slow-factor", type=float, default=1.25)
    ap.add_argument("--hta-python", default=None)
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--hta-mem-gb", type=float, default=4.0, help="HTA's address-space limit")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--build", default="", help=argparse.SUPPRESS)  # internal: build, then exit
    return ap.parse_args()


def _build_args(args: argparse.Namespace) -> list[str]:
    return [
        "--ranks", str(args.ranks), "--source", args.source,
        "--slow-rank", str(args.slow_rank), "--slow-factor", str(args.slow_factor),
    ]  # fmt: skip


def _build(cmd: list[str]) -> None:
    # In a child, so this process stays small (a child's peak RSS counts its parent's pages).
    subprocess.run(cmd, check=True)


def build_folder(source: Path, folder: Path, ranks: int, slow: int, factor: float) -> None:
    """Write ``ranks`` gzipped per-rank copies of ``source`` (see the module docstring)."""
    doc = msgspec.json.decode(gzip.decompress(source.read_bytes()))
    events: list[dict[str, Any]] = doc.pop("traceEvents")
    doc.pop("INFO", None)
    id_step = _max_id(events) + 1
    t0 = min(e["ts"] for e in events if isinstance(e.get("ts"), int | float))
    rng = random.Random(13)
    folder.mkdir(parents=True)
    for r in range(ranks):
        stretch = factor if r == slow else rng.uniform(0.98, 1.02)
        move = _shifter(rng.uniform(0.0, 20.0), r * id_step, 0)
        out = [_stretched(move(e), t0, stretch) for e in events]
        info = {**doc.get("distributedInfo", {}), "rank": r, "world_size": ranks}
        # The header as the profiler writes it ("rank": 5, with a space): HTA finds a file's
        # rank with a regular expression that needs the space.
        head = json.dumps({**doc, "distributedInfo": info})[:-1].encode()
        body = head + b', "traceEvents": ' + msgspec.json.encode(out) + b"}"
        (folder / f"rank{r}.json.gz").write_bytes(gzip.compress(body, compresslevel=1))


def _stretched(e: dict[str, Any], t0: float, k: float) -> dict[str, Any]:
    if k != 1.0 and isinstance(e.get("ts"), int | float):
        e["ts"] = t0 + (e["ts"] - t0) * k
        if isinstance(e.get("dur"), int | float):
            e["dur"] = e["dur"] * k
    return e


class TreeRss:
    """Samples the summed RSS of a process and all its descendants (peak, MiB)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_mib = pid, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            self.peak_mib = max(self.peak_mib, _tree_rss_mib(self.pid))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_mib


def _tree_rss_mib(root: int) -> float:
    parent, rss = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            parent[int(d)], rss[int(d)] = int(fields[1]), int(fields[21])
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = {root}, [root]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier and p not in tree]
        tree.update(kids)
        frontier = kids
    return sum(rss.get(p, 0) for p in tree) * _PAGE / (1 << 20)


def run(cmd: list[str], timeout_s: float, preexec: Callable[[], None] | None = None) -> dict:
    """One whole process: wall s, CPU s, peak RSS of its largest process and of its tree."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, preexec_fn=preexec)
        sampler = TreeRss(proc.pid)
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        wall = time.perf_counter() - start
        tree = sampler.stop()
        out.seek(0)
        err.seek(0)
        return {
            "wall_s": wall,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "max_proc_mib": usage.ru_maxrss / 1024,
            "tree_mib": max(tree, usage.ru_maxrss / 1024),
            "status": os.waitstatus_to_exitcode(status),
            "stdout": out.read().decode(),
            "stderr": err.read().decode()[-2000:],
        }


def _td(folder: Path, jobs: int) -> list[str]:
    script = Path(sys.executable).with_name("torchdoctor")
    base = [str(script)] if script.exists() else [sys.executable, "-m", "torchdoctor"]
    return [*base, "analyze", "--json", "--jobs", str(jobs), str(folder)]


def _limit(gb: float) -> Callable[[], None]:
    def apply() -> None:
        limit = int(gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def _headline(folder: Path, hta: str | None, args: argparse.Namespace) -> dict[str, list[dict]]:
    arms: dict[str, tuple[list[str], Callable[[], None] | None]] = {
        "torchdoctor --jobs 1": (_td(folder, 1), None),
        "torchdoctor --jobs 2": (_td(folder, 2), None),
    }
    if hta:
        arms["HTA"] = ([hta, "-c", HTA_SCRIPT, str(folder)], _limit(args.hta_mem_gb))
    names = list(arms)
    results: dict[str, list[dict]] = {n: [] for n in names}
    for k in range(args.rounds):
        for name in names[k % len(names) :] + names[: k % len(names)]:
            cmd, pre = arms[name]
            r = run(cmd, args.timeout, pre)
            results[name].append(r)
            print(f"round {k + 1} {name}: {r['wall_s']:.1f} s, exit {r['status']}", flush=True)
    return results


def _scaling(folder: Path, tmp: Path, args: argparse.Namespace) -> list[tuple[int, dict]]:
    """--jobs 2 on the first N ranks of the folder (links), for each N."""
    out = []
    for n in [int(x) for x in args.scaling.split(",") if x]:
        sub = tmp / f"first{n}"
        sub.mkdir()
        for r in range(min(n, args.ranks)):
            (sub / f"rank{r}.json.gz").symlink_to(folder / f"rank{r}.json.gz")
        out.append((n, run(_td(sub, 2), args.timeout)))
    return out


def _median(runs: list[dict], key: str) -> float | None:
    ok = sorted(r[key] for r in runs if r["status"] == 0)
    return ok[len(ok) // 2] if ok else None


def _found(runs: list[dict]) -> str:
    for r in runs:
        if r["status"] == 0:
            report = json.loads(r["stdout"])
            slow = [f for f in report["findings"] if f["id"] == "straggler-rank"]
            return f"rank {slow[0]['evidence']['rank']}" if slow else "none"
    return "-"


def _outcome(runs: list[dict]) -> str:
    bad = [r for r in runs if r["status"] != 0]
    if not bad:
        return "ok"
    lines = bad[0]["stderr"].strip().splitlines()
    return f"failed ({lines[-1][:60] if lines else bad[0]['status']})"


def _report(
    rows: dict[str, list[dict]], scaling: list[tuple[int, dict]], a: argparse.Namespace
) -> None:
    print(f"\n{a.ranks} ranks of {a.source}, rank {a.slow_rank} slowed x{a.slow_factor}:")
    table = [
        [
            name,
            fmt(_median(runs, "wall_s"), ".1f"),
            fmt(_median(runs, "cpu_s"), ".1f"),
            fmt(_median(runs, "max_proc_mib"), ".0f"),
            fmt(_median(runs, "tree_mib"), ".0f"),
            _found(runs) if name != "HTA" else "(no straggler analysis)",
            _outcome(runs),
        ]
        for name, runs in rows.items()
    ]
    print_table(
        ["tool", "wall s", "cpu s", "largest proc MiB", "tree MiB", "straggler", "outcome"], table
    )
    print("\nmemory as ranks grow (--jobs 2):")
    print_table(
        ["ranks", "wall s", "largest proc MiB", "tree MiB", "straggler"],
        [
            [
                str(n),
                fmt(r["wall_s"], ".1f"),
                fmt(r["max_proc_mib"], ".0f"),
                fmt(r["tree_mib"], ".0f"),
                _found([r]),
            ]
            for n, r in scaling
        ],
    )
    print(_headline_line(rows, scaling, a))


def _headline_line(
    rows: dict[str, list[dict]], scaling: list[tuple[int, dict]], a: argparse.Namespace
) -> str:
    j1, j2 = (
        _median(rows["torchdoctor --jobs 1"], "wall_s"),
        _median(rows["torchdoctor --jobs 2"], "wall_s"),
    )
    hta = _median(rows.get("HTA", []), "wall_s")
    line = f"headline {a.ranks} ranks: --jobs 2 {fmt(j2, '.1f')} s, --jobs 1 {fmt(j1, '.1f')} s"
    line += (
        f", HTA {fmt(hta, '.1f')} s"
        if hta
        else f", HTA {_outcome(rows.get('HTA', [{'status': 0}]))}"
    )
    if hta and j2:
        line += f" ({hta / j2:.1f}x --jobs 2)"
    mem = [r["tree_mib"] for _, r in scaling]
    if mem:
        line += f"; tree peak {min(mem):.0f}-{max(mem):.0f} MiB over {a.scaling} ranks"
    return line


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    ns = _parse_args()
    if ns.build:
        build_folder(
            TRACES / f"{ns.source}.json.gz", Path(ns.build), ns.ranks, ns.slow_rank, ns.slow_factor
        )
    else:
        main()
