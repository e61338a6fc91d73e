"""One trace, torchdoctor against HTA, side by side: the ratio per round and where the time goes.

    python benchmarks/bench_one_trace.py [--rounds 7] [--trace v100_ddp_compiled_rank1]
        [--baseline-src DIR]

Each round runs, as whole processes and in a rotating order: ``torchdoctor analyze --json TRACE``,
HTA's ``TraceAnalysis`` + ``get_temporal_breakdown`` on a folder holding only that trace, and a
stage-timing child that does what ``analyze --json`` does with a timer between stages (interpreter
start = its whole-process wall time minus the time measured inside it). The headline is the median
of the per-round ratios HTA / torchdoctor (wall time), with the lowest and highest round.

``--baseline-src DIR`` adds a fourth arm: the same ``analyze --json`` with ``PYTHONPATH=DIR``, so
an older ``src/`` (``git archive COMMIT src | tar -x -C /tmp/base``, then ``/tmp/base/src``) is
measured in the same rounds, and the table gains the per-round ratio baseline / torchdoctor.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench_common import (
    HTA_SCRIPT,
    TRACES,
    compile_bytecode,
    environment,
    hta_python,
    print_table,
    python_cmd,
    result_line,
    run_child,
    torchdoctor_cmd,
)

STAGES = ("imports", "load", "analyses", "rules + report", "JSON")
STAGE_SCRIPT = """
import json, os, sys, time
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")  # as the CLI does
marks = [(time.perf_counter(), time.process_time())]
def mark():
    marks.append((time.perf_counter(), time.process_time()))
from torchdoctor.commands.analyze.trace import build_report
from torchdoctor.analysis.bundle import analyze_table
from torchdoctor.trace.load import load_trace
from torchdoctor.report.render import render_json
mark()
table = load_trace(sys.argv[1]); mark()
analysis = analyze_table(table); mark()
report = build_report(analysis); mark()
text = render_json(report); mark()
wall = [b[0] - a[0] for a, b in zip(marks, marks[1:])]
cpu = [b[1] - a[1] for a, b in zip(marks, marks[1:])]
print("BENCH_RESULT " + json.dumps({"wall": wall, "cpu": cpu}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--trace", default="v100_ddp_compiled_rank1")
    ap.add_argument("--hta-python", default=None)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--baseline-src", default=None, help="an older src/ folder to compare with")
    args = ap.parse_args()
    trace = TRACES / f"{args.trace}.json.gz"
    if not trace.is_file():
        sys.exit(f"{trace} not found (set TORCHDOCTOR_TRACES)")
    hta = hta_python(args.hta_python)
    if hta is None:
        sys.exit("HTA is needed for this benchmark")
    print(environment())
    extra = [Path(args.baseline_src).resolve()] if args.baseline_src else []
    print(compile_bytecode(*extra))
    with tempfile.TemporaryDirectory(prefix="td-one-") as tmp:
        folder = Path(tmp) / "one"
        folder.mkdir()
        shutil.copy(trace, folder / trace.name)
        arms = {
            "torchdoctor": [*torchdoctor_cmd(), "analyze", "--json", str(trace)],
            "HTA": [hta, "-c", HTA_SCRIPT, str(folder)],
            "stages": [*python_cmd(), "-c", STAGE_SCRIPT, str(trace)],
        }
        if args.baseline_src:
            base = Path(args.baseline_src).resolve()
            if not (base / "torchdoctor" / "__init__.py").is_file():
                sys.exit(f"{base}: not a src/ folder holding torchdoctor")
            arms["baseline"] = [*torchdoctor_cmd(base), "analyze", "--json", str(trace)]
        rounds = _rounds(arms, args.rounds, args.timeout)
    _report(rounds, args.trace)


def _rounds(arms: dict[str, list[str]], n: int, timeout: float) -> list[dict[str, object]]:
    names = list(arms)
    out = []
    for k in range(n):
        got: dict[str, object] = {}
        turn = k % len(names)
        for name in names[turn:] + names[:turn]:
            run = run_child(arms[name], timeout)
            if run.status != 0:
                sys.exit(f"{name} failed: {run.stderr.strip().splitlines()[-1:]}")
            got[name] = run
        out.append(got)
        td, hta = got["torchdoctor"].wall_s, got["HTA"].wall_s  # type: ignore[attr-defined]
        line = f"round {k + 1}: torchdoctor {td:.2f} s, HTA {hta:.2f} s, {hta / td:.1f}x"
        if "baseline" in got:
            line += f"; baseline {got['baseline'].wall_s:.2f} s"  # type: ignore[attr-defined]
        print(line, flush=True)
    return out


def _report(rounds: list[dict[str, object]], trace: str) -> None:
    def med(values: list[float]) -> float:
        return statistics.median(values)

    td = [r["torchdoctor"].wall_s for r in rounds]  # type: ignore[attr-defined]
    hta = [r["HTA"].wall_s for r in rounds]  # type: ignore[attr-defined]
    td_cpu = [r["torchdoctor"].cpu_s for r in rounds]  # type: ignore[attr-defined]
    hta_cpu = [r["HTA"].cpu_s for r in rounds]  # type: ignore[attr-defined]
    stages = [result_line(r["stages"].stdout) for r in rounds]  # type: ignore[attr-defined]
    inside = [sum(s["wall"]) for s in stages]
    start = [r["stages"].wall_s - i for r, i in zip(rounds, inside, strict=True)]  # type: ignore[attr-defined]
    rows = [["interpreter start + exit", f"{med(start):.3f}", "-"]]
    for j, name in enumerate(STAGES):
        rows.append(
            [
                name,
                f"{med([s['wall'][j] for s in stages]):.3f}",
                f"{med([s['cpu'][j] for s in stages]):.3f}",
            ]
        )
    rows.append(["whole analyze --json process", f"{med(td):.3f}", f"{med(td_cpu):.3f}"])
    rows.append(["HTA load + temporal breakdown", f"{med(hta):.3f}", f"{med(hta_cpu):.3f}"])
    if "baseline" in rounds[0]:
        base = [r["baseline"].wall_s for r in rounds]  # type: ignore[attr-defined]
        base_cpu = [r["baseline"].cpu_s for r in rounds]  # type: ignore[attr-defined]
        rows.append(["baseline analyze --json process", f"{med(base):.3f}", f"{med(base_cpu):.3f}"])
    print(f"\n{trace}, medians of {len(rounds)} interleaved rounds:")
    print_table(["stage", "wall s", "cpu s"], rows)
    ratios = sorted(h / t for h, t in zip(hta, td, strict=True))
    cpu_ratio = med([h / t for h, t in zip(hta_cpu, td_cpu, strict=True)])
    print(json.dumps({"per_round_ratio": [round(x, 2) for x in ratios]}))
    if "baseline" in rounds[0]:
        gain = sorted(b / t for b, t in zip(base, td, strict=True))
        gain_cpu = med([b / t for b, t in zip(base_cpu, td_cpu, strict=True)])
        print(
            f"baseline / torchdoctor: {med(gain):.2f}x wall (rounds {gain[0]:.2f}-"
            f"{gain[-1]:.2f}x), {gain_cpu:.2f}x CPU"
        )
    print(
        f"headline {trace}: HTA / torchdoctor = {med(ratios):.1f}x wall (rounds "
        f"{ratios[0]:.1f}-{ratios[-1]:.1f}x), {cpu_ratio:.1f}x CPU; torchdoctor {med(td):.2f} s, "
        f"HTA {med(hta):.2f} s"
    )


if __name__ == "__main__":
    main()
