"""torchdoctor vs Holistic Trace Analysis on the same traces: wall time and peak memory.

    python benchmarks/bench_analyze_vs_hta.py [--repeats 5] [--traces v100_ddp_compiled_rank1,...]

Each measurement is a separate process, run as a user would: ``torchdoctor analyze --json TRACE``
(the whole report), the loader alone (load + step detection, the "load only" column), and HTA's
``TraceAnalysis(trace_dir=...)`` plus ``get_temporal_breakdown(visualize=False)`` on a folder holding
just that trace. Runs are interleaved (tool order rotates every repeat) so a noisy machine slows
all tools alike; the table shows medians. HTA comes from ``--hta-python``, ``$HTA_PYTHON``, this
interpreter, or a venv this script creates in ``benchmarks/.hta-venv``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_common import (
    HTA_SCRIPT,
    LOAD_SCRIPT,
    TRACES,
    Series,
    compile_bytecode,
    environment,
    fmt,
    hta_python,
    print_table,
    python_cmd,
    ratio,
    result_line,
    run_child,
    torchdoctor_cmd,
)

HEADLINE = "v100_ddp_compiled_rank1"
TOOLS = ("torchdoctor", "load only", "HTA")


def main() -> None:
    args = _parse_args()
    hta = None if args.no_hta else hta_python(args.hta_python)
    traces = _traces(args.traces)
    print(environment())
    print(compile_bytecode())
    with tempfile.TemporaryDirectory(prefix="td-bench-") as tmp:
        dirs = _one_trace_dirs(traces, Path(tmp))
        series = _measure(dirs, hta, args.repeats, args.timeout)
    _report(traces, series)


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs per tool and trace (median)")
    ap.add_argument("--traces", default="", help="comma-separated trace stems (default: all)")
    ap.add_argument("--hta-python", default=None, help="interpreter with HTA installed")
    ap.add_argument("--no-hta", action="store_true", help="measure torchdoctor only")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    return ap.parse_args()


def _traces(spec: str) -> list[Path]:
    if not TRACES.is_dir():
        sys.exit(f"trace corpus not found at {TRACES} (set TORCHDOCTOR_TRACES)")
    found = sorted(TRACES.glob("*.json.gz"))
    if spec:
        wanted = spec.split(",")
        found = [p for p in found if p.name.removesuffix(".json.gz") in wanted]
    if not found:
        sys.exit("no traces selected")
    return found


def _one_trace_dirs(traces: list[Path], tmp: Path) -> dict[Path, Path]:
    """A folder per trace holding only that trace (HTA reads every trace in its folder)."""
    out = {}
    for trace in traces:
        d = tmp / trace.name.removesuffix(".json.gz")
        d.mkdir()
        shutil.copy(trace, d / trace.name)
        out[trace] = d
    return out


def _commands(trace_dir: Path, trace: Path, hta: str | None) -> dict[str, list[str]]:
    cmds = {
        "torchdoctor": [*torchdoctor_cmd(), "analyze", "--json", str(trace)],
        "load only": [*python_cmd(), "-c", LOAD_SCRIPT, str(trace)],
    }
    if hta:
        cmds["HTA"] = [hta, "-c", HTA_SCRIPT, str(trace_dir)]
    return cmds


def _measure(
    dirs: dict[Path, Path], hta: str | None, repeats: int, timeout: float
) -> dict[tuple[Path, str], Series]:
    """Run every tool on every trace ``repeats`` times, rotating the tool order each round."""
    series: dict[tuple[Path, str], Series] = {}
    for rep in range(repeats):
        for trace, trace_dir in dirs.items():
            cmds = list(_commands(trace_dir, trace, hta).items())
            shift = rep % len(cmds)
            for tool, cmd in cmds[shift:] + cmds[:shift]:
                run = run_child(cmd, timeout)
                series.setdefault((trace, tool), Series()).runs.append(run)
        print(f"round {rep + 1}/{repeats} done", file=sys.stderr, flush=True)
    return series


def _breakdown(s: Series | None, key: str = "") -> dict[str, Any]:
    """HTA's idle/compute/non-compute percentages from a run's output (HTA or torchdoctor)."""
    if s is None or not s.ok:
        return {}
    out = s.ok[0].stdout
    if key:
        try:
            return json.loads(out).get(key) or {}
        except json.JSONDecodeError:
            return {}
    found = result_line(out)
    return found if isinstance(found, dict) else {}


def _pcts(d: dict[str, Any]) -> str:
    keys = ("idle_pct", "compute_pct", "non_compute_pct")
    return "/".join(f"{d[k]:.1f}" for k in keys) if all(k in d for k in keys) else "-"


def _report(traces: list[Path], series: dict[tuple[Path, str], Series]) -> None:
    header = [
        "trace",
        "td s",
        "(range)",
        "load s",
        "HTA s",
        "(range)",
        "speedup",
        "td cpu",
        "HTA cpu",
    ]
    header += ["td MiB", "HTA MiB", "mem", "HTA idle/comp/non-comp %", "td idle/comp/non-comp %"]
    rows = []
    for trace in traces:
        td, load, hta = (series.get((trace, t)) for t in TOOLS)
        assert td is not None and load is not None
        hta_wall = hta.median_wall() if hta else None
        hta_peak = hta.median_peak() if hta else None
        rows.append(
            [
                trace.name.removesuffix(".json.gz"),
                fmt(td.median_wall()) if td.ok else td.failure(),
                td.spread(),
                fmt(load.median_wall()),
                fmt(hta_wall) if hta is None or hta.ok else hta.failure()[:30],
                hta.spread() if hta else "-",
                ratio(hta_wall, td.median_wall()),
                fmt(td.median_cpu()),
                fmt(hta.median_cpu() if hta else None),
                fmt(td.median_peak(), ".0f"),
                fmt(hta_peak, ".0f"),
                ratio(hta_peak, td.median_peak()),
                _pcts(_breakdown(hta)),
                _pcts(_breakdown(td, "hta_compatible")),
            ]
        )
    print_table(header, rows)
    _headline(traces, series)


def _headline(traces: list[Path], series: dict[tuple[Path, str], Series]) -> None:
    main = [t for t in traces if t.name.startswith(HEADLINE)]
    if not main:
        return
    td, load, hta = (series.get((main[0], t)) for t in TOOLS)
    if td is None or load is None or hta is None or not hta.ok or not td.ok:
        print(f"headline {HEADLINE}: no HTA result to compare with")
        return
    print(
        f"headline {HEADLINE}: torchdoctor analyze {fmt(td.median_wall())} s "
        f"(load only {fmt(load.median_wall())} s) vs HTA {fmt(hta.median_wall())} s = "
        f"{ratio(hta.median_wall(), td.median_wall())} faster (CPU {fmt(td.median_cpu())} vs "
        f"{fmt(hta.median_cpu())} s = {ratio(hta.median_cpu(), td.median_cpu())}); peak "
        f"{fmt(td.median_peak(), '.0f')} vs {fmt(hta.median_peak(), '.0f')} MiB = "
        f"{ratio(hta.median_peak(), td.median_peak())} less memory"
    )


if __name__ == "__main__":
    main()
