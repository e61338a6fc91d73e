"""A ~1 GB trace: does torchdoctor analyse it streaming, and can HTA at all?

    python benchmarks/bench_large_trace.py [--size-gb 1.0] [--source v100_ddp_compiled_rank1]
                                           [--hta-timeout 600] [--hta-mem-gb 8]

Builds the trace in a temporary folder by repeating every event of a corpus trace with shifted
timestamps, fresh correlation / External / flow ids and renumbered ProfilerStep markers, writing
one copy at a time (the big file is never in memory). Then measures, as separate processes:
``torchdoctor analyze --json``, the loader alone, and HTA (load + temporal breakdown) under a time
and address-space limit, so that it fails cleanly instead of taking the machine's memory.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from bench_common import (
    HTA_SCRIPT,
    LOAD_SCRIPT,
    TRACES,
    Run,
    compile_bytecode,
    environment,
    fmt,
    hta_python,
    print_table,
    python_cmd,
    ratio,
    run_child,
    torchdoctor_cmd,
)

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_ID_ARGS = ("External id", "correlation", "Ev Idx")


def main() -> None:
    args = _parse_args()
    source = TRACES / f"{args.source}.json.gz"
    if not source.is_file():
        sys.exit(f"{source} not found (set TORCHDOCTOR_TRACES)")
    if args.build:
        build_large_trace(source, Path(args.build), int(args.size_gb * 1e9))
        return
    hta = None if args.no_hta else hta_python(args.hta_python)
    print(environment())
    print(compile_bytecode())
    with tempfile.TemporaryDirectory(prefix="td-large-") as tmp:
        trace_dir = Path(tmp) / "trace"
        trace_dir.mkdir()
        big = trace_dir / f"{args.source}_x.json"
        start = time.perf_counter()
        # Built by a child process: this one must stay small while it measures others (a
        # child's peak RSS includes the pages of the parent it was forked from).
        build = [sys.executable, __file__, "--build", str(big), "--size-gb", str(args.size_gb)]
        subprocess.run([*build, "--source", args.source], check=True)
        size_gb = big.stat().st_size / 1e9
        print(f"built {big.name}: {size_gb:.2f} GB in {time.perf_counter() - start:.0f} s")
        runs = _measure(big, trace_dir, hta, args)
    _report(runs, size_gb)


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-gb", type=float, default=1.0, help="size of the JSON to build")
    ap.add_argument("--source", default="v100_ddp_compiled_rank1", help="corpus trace to repeat")
    ap.add_argument("--hta-python", default=None, help="interpreter with HTA installed")
    ap.add_argument("--no-hta", action="store_true", help="measure torchdoctor only")
    ap.add_argument("--hta-timeout", type=float, default=600.0, help="seconds before HTA is killed")
    ap.add_argument("--hta-mem-gb", type=float, default=8.0, help="HTA's address-space limit")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per torchdoctor run")
    ap.add_argument("--build", default="", help=argparse.SUPPRESS)  # internal: build, then exit
    return ap.parse_args()


def build_large_trace(source: Path, dest: Path, target_bytes: int) -> int:
    """Write ``dest``: ``source``'s events repeated until about ``target_bytes``; return copies."""
    doc = msgspec.json.decode(gzip.decompress(source.read_bytes()))
    events: list[dict[str, Any]] = doc.pop("traceEvents")
    once = [e for e in events if e.get("ph") == "M"]  # process/thread names: once is enough
    body = [e for e in events if e.get("ph") != "M"]
    timed = [e for e in body if isinstance(e.get("ts"), int | float)]
    start = min(e["ts"] for e in timed)
    period = max(e["ts"] + (e.get("dur") or 0) for e in timed) - start + 1000  # 1 ms apart
    id_step = _max_id(body) + 1
    steps = _step_count(body)
    copy_bytes = len(msgspec.json.encode(body))
    copies = max(1, round(target_bytes / copy_bytes))
    tail = {k: doc.pop(k) for k in list(doc) if k in ("traceName", "displayTimeUnit")}
    with dest.open("wb") as out:
        out.write(msgspec.json.encode(doc)[:-1] + (b", " if doc else b"") + b'"traceEvents": [\n')
        if once:
            out.write(msgspec.json.encode(once)[1:-1] + b",\n")
        for k in range(copies):
            shift = _shifter(k * period, k * id_step, k * steps)
            # Each copy is shifted from the original, so no copy is ever the size of the file.
            text = msgspec.json.encode([shift(e) for e in body])[1:-1]
            out.write(text + (b",\n" if k < copies - 1 else b"\n"))
        out.write(b"]" + (b", " + msgspec.json.encode(tail)[1:] if tail else b"}"))
    return copies


def _shifter(dt: float, did: int, dstep: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A function giving an event moved by ``dt`` us with ids and step numbers moved on."""

    def shift(ev: dict[str, Any]) -> dict[str, Any]:
        out = dict(ev)
        if isinstance(out.get("ts"), int | float):
            out["ts"] = out["ts"] + dt
        if out.get("ph") in ("s", "f") and isinstance(out.get("id"), int):
            out["id"] = out["id"] + did
        args = out.get("args")
        if isinstance(args, dict):
            out["args"] = {
                k: v + did if k in _ID_ARGS and isinstance(v, int) and v >= 0 else v
                for k, v in args.items()
            }
        m = _STEP.match(str(out.get("name", "")))
        if m:
            out["name"] = f"ProfilerStep#{int(m.group(1)) + dstep}"
        return out

    return shift


def _max_id(events: list[dict[str, Any]]) -> int:
    ids = [e["id"] for e in events if isinstance(e.get("id"), int)]
    for e in events:
        args = e.get("args")
        if isinstance(args, dict):
            ids += [v for k, v in args.items() if k in _ID_ARGS and isinstance(v, int)]
    return max(ids, default=0)


def _step_count(events: list[dict[str, Any]]) -> int:
    numbers = {int(m.group(1)) for e in events if (m := _STEP.match(str(e.get("name", ""))))}
    return max(numbers) - min(numbers) + 1 if numbers else 0


def _limit_memory(gb: float) -> Callable[[], None]:
    def apply() -> None:
        limit = int(gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def _measure(
    big: Path, trace_dir: Path, hta: str | None, args: argparse.Namespace
) -> dict[str, Run]:
    runs = {
        "torchdoctor analyze": run_child(
            [*torchdoctor_cmd(), "analyze", "--json", str(big)], args.timeout
        ),
        "load only": run_child([*python_cmd(), "-c", LOAD_SCRIPT, str(big)], args.timeout),
    }
    for name, run in runs.items():
        print(f"{name}: {run.wall_s:.1f} s, {run.peak_mib:.0f} MiB, exit {run.status}", flush=True)
    if hta:
        runs["HTA"] = run_child(
            [hta, "-c", HTA_SCRIPT, str(trace_dir)],
            args.hta_timeout,
            preexec=_limit_memory(args.hta_mem_gb),
        )
    return runs


def _outcome(run: Run, limit_note: str) -> str:
    if run.status == 0:
        return "ok"
    if run.status == -9:
        return f"killed ({limit_note})"
    last = run.stderr.strip().splitlines()[-1:] or [f"exit {run.status}"]
    return last[0][:70]


def _report(runs: dict[str, Run], size_gb: float) -> None:
    rows = [
        [
            name,
            fmt(r.wall_s, ".1f"),
            fmt(r.cpu_s, ".1f"),
            fmt(r.peak_mib, ".0f"),
            _outcome(r, "limit"),
        ]
        for name, r in runs.items()
    ]
    print_table(["tool", "wall s", "cpu s", "peak MiB", "outcome"], rows)
    td = runs["torchdoctor analyze"]
    hta = runs.get("HTA")
    line = (
        f"headline {size_gb:.2f} GB trace: torchdoctor analyze {td.wall_s:.1f} s, peak "
        f"{td.peak_mib:.0f} MiB ({td.peak_mib / (size_gb * 1000 / 1.048576):.0%} of the file)"
    )
    if hta is None:
        line += "; HTA not measured"
    elif hta.status == 0:
        line += (
            f"; HTA {hta.wall_s:.1f} s, {hta.peak_mib:.0f} MiB "
            f"({ratio(hta.wall_s, td.wall_s)} slower)"
        )
    else:
        line += f"; HTA did not finish: {_outcome(hta, 'time limit')} after {hta.wall_s:.0f} s"
    print(line)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
