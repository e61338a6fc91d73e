"""GPU check, kernels section: every kernel that takes >= 1% of the GPU time in the check's own
traces (the analyze section's planted cases, the check runs' profiled windows) is classified by
its name's family grammar: tensor cores yes or no, and a dtype, or a family whose names carry
none (then none is claimed). An unrecognised name fails the section and is named in its figure.

    python scripts/gpu_check_kernels.py WORK

Reads ``WORK/analyze/*.json.gz`` and ``WORK/runs-*/**/*.json.gz``; needs no GPU (it reads traces),
so it also runs on recorded traces: ``python scripts/gpu_check_kernels.py WORK TRACE...``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check_judge as judge

MIN_SHARE = 0.01


def traces_of(work: Path) -> list[Path]:
    """The traces the earlier sections left in ``work``."""
    found = sorted((work / "analyze").glob("*.json.gz"))
    found += sorted(work.glob("runs-*/**/*.json.gz"))  # trace.json.gz, traces/rank0.json.gz
    return found


def kernels_over(path: Path, min_share: float = MIN_SHARE) -> dict[str, Any]:
    """The kernels of one trace taking >= ``min_share`` of its GPU time, with their
    classification (``analysis.kernels.KernelRow``)."""
    from torchdoctor.analysis.kernels import analyze_kernels
    from torchdoctor.trace.load import load_trace
    from torchdoctor.trace.steps import find_steps

    table = load_trace(path)
    stats = analyze_kernels(table, find_steps(table), top_n=10**6)
    rows = [r for r in stats.top_kernels if r.share_of_gpu_time >= min_share]
    return {
        "gpu_ms": round(stats.gpu_time_ms, 3),
        "kernels": [
            {
                "name": r.name[:300],
                "category": r.category,
                "family": r.family,
                "tensor_core": r.tensor_core,
                "dtype": r.dtype,
                "dtype_in_name": r.dtype_in_name,
                "share": round(r.share_of_gpu_time, 4),
                "classified": r.classified,
            }
            for r in rows
        ],
    }


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: gpu_check_kernels.py WORK [TRACE...]", file=sys.stderr)
        return 2
    work = Path(argv[0])
    paths = [Path(p) for p in argv[1:]] or traces_of(work)
    t0 = time.perf_counter()
    evidence: dict[str, Any] = {"traces": {}}
    for p in paths:
        name = str(p.relative_to(work)) if p.is_relative_to(work) else p.name
        try:
            evidence["traces"][name] = kernels_over(p)
        except Exception as exc:  # one unreadable trace is named; the others are still read
            evidence.setdefault("unreadable", {})[name] = f"{type(exc).__name__}: {exc}"
    out = judge.write(work, "kernels", evidence, time.perf_counter() - t0)
    print(f"kernels {'PASS' if out['pass'] else 'FAIL'}  {out['figure']}", flush=True)
    return 0 if out["pass"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
