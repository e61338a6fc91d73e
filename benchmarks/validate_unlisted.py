"""What ``torchdoctor check`` says about each script of ``examples/unlisted``, before and after
the step's account: the top actionable finding (first warning or critical one with a saving),
its share, whether it names the planted mistake, and whether the finding or the top row of the
line table points at the planted line. Healthy controls must get no actionable finding.

    python benchmarks/validate_unlisted.py                     # this tree ("after")
    python benchmarks/validate_unlisted.py --before /path/src  # another tree's src ("before")
    python benchmarks/validate_unlisted.py --json out.json --cases gc_every_step.py

Each run is a fresh process, with the case's environment (one intra-op thread unless the case
is about threads). The last line is the headline: cases named (or at worst their line at the
top of the table), controls quiet.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from unlisted_cases import CASES, Case

SRC = Path(__file__).resolve().parents[1] / "src"


def run_check(case: Case, src: Path, opts: list[str], timeout: float) -> dict[str, Any]:
    """``check`` on one case with ``src`` first on the path; the report and the run record."""
    out = Path(tempfile.mkdtemp(prefix="td-unlisted-"))
    env = {**os.environ, "PYTHONPATH": str(src), **dict(case.env)}
    if not case.env:
        env.pop("OMP_NUM_THREADS", None)
    cmd = [sys.executable, "-m", "torchdoctor", "check", *opts, "--out", str(out), str(case.path)]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=case.path.parent
    )
    folders = [p for p in out.iterdir() if p.is_dir()]
    if not folders or not (folders[0] / "report.json").is_file():
        return {"error": proc.stderr[-2000:], "code": proc.returncode}
    report = json.loads((folders[0] / "report.json").read_text())
    run = json.loads((folders[0] / "run.json").read_text())
    return {"report": report, "run": run, "code": proc.returncode}


def judge(case: Case, got: dict[str, Any]) -> dict[str, Any]:
    """The row of the validation table for one run."""
    if "error" in got:
        return {"script": case.script, "error": got["error"][-300:]}
    report, run = got["report"], got["run"]
    findings = report.get("findings") or []
    actionable = [f for f in findings if f["severity"] != "info" and f["saving_ms_per_step"] > 0]
    top = actionable[0] if actionable else None
    named = next((f for f in actionable if f["id"] in case.expect), None)
    rows = (run.get("lines") or {}).get("rows") or []
    top_row = max(rows, key=lambda r: float(r.get("self_ms") or 0), default=None)

    def points(f: dict[str, Any] | None) -> bool:
        if f is None or not case.line:
            return False
        text = json.dumps(f.get("where")) + json.dumps(f.get("evidence", {}).get("account", {}))
        return any(case.line in _source(w) for w in f.get("where") or []) or case.line in text

    row_hit = top_row is not None and case.line and case.line in str(top_row.get("code") or "")
    return {
        "script": case.script,
        "mistake": case.mistake or "(healthy control)",
        "top": None if top is None else top["id"],
        "top_share": None if top is None else top["share_of_step"],
        "top_title": None if top is None else top["title"],
        "named": named is not None,
        "named_share": None if named is None else named["share_of_step"],
        "named_rank": None if named is None else actionable.index(named) + 1,
        "points_at_line": points(named) or bool(row_hit),
        "top_line": None if top_row is None else f"{Path(str(top_row['site'])).name}",
        "verdict": (report.get("analysis") or {}).get("verdict") or report.get("verdict"),
        "median_step_ms": (run.get("steps") or {}).get("median_step_ms"),
        "efficiency": ((run.get("roofline") or {}).get("efficiency") or {}).get("share"),
        "ok": (top is None) if case.control else (named is not None or bool(row_hit)),
    }


def _source(site: str) -> str:
    file, _, line = str(site).rpartition(":")
    try:
        return Path(file).read_text().splitlines()[int(line) - 1]
    except (OSError, ValueError, IndexError):
        return ""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--before", type=Path, default=None, help="src folder of the code to compare")
    p.add_argument("--cases", nargs="*", default=None)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--check-opts", default="--warmup 5 --steps 5")
    p.add_argument("--timeout", type=float, default=600)
    args = p.parse_args()
    cases = [c for c in CASES if args.cases is None or c.script in args.cases]
    src = args.before or SRC
    rows = []
    for case in cases:
        row = judge(case, run_check(case, src, args.check_opts.split(), args.timeout))
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"\n{'script':<26} {'top finding':<24} {'share':>6}  named  line  ok")
    for r in rows:
        share = "" if r.get("top_share") is None else f"{r['top_share']:.0%}"
        print(
            f"{r['script']:<26} {r.get('top')!s:<24} {share:>6}  {r.get('named')!s:<5}  "
            f"{r.get('points_at_line')!s:<5} {r.get('ok')}"
        )
    mistakes = [r for r in rows if r.get("mistake") != "(healthy control)"]
    controls = [r for r in rows if r.get("mistake") == "(healthy control)"]
    print(
        f"cases named or pointed at: {sum(bool(r.get('ok')) for r in mistakes)}/{len(mistakes)}; "
        f"controls quiet: {sum(bool(r.get('ok')) for r in controls)}/{len(controls)}"
    )


if __name__ == "__main__":
    main()
