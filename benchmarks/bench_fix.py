"""`torchdoctor fix --prove` on the example scripts: what each finding predicted beside what the
patched script measured (interleaved fresh processes), and whether the losses held.

    python benchmarks/bench_fix.py            # every case (about 10-20 minutes on 2 CPUs)
    python benchmarks/bench_fix.py --only slow_loader,item_logging

Each case runs in a scratch folder (the example is copied there; nothing in the repository is
written). The anomaly case adds the ``anomaly-detection`` finding to check's report, since no
rule of this version names anomaly mode. One intra-op thread on every side (the change is the
subject, not the thread count). The last line is the headline: changes proven, and the median
of measured / predicted speed-up over the changes that had a prediction.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# name, example, extra fix args, inject anomaly finding
CASES: list[tuple[str, str, list[str], bool]] = [
    ("slow_loader", "examples/fix/slow_loader.py", [], False),
    ("anomaly_mode", "examples/fix/anomaly_mode.py", [], True),
    ("item_logging", "examples/fix/item_logging.py", ["--prove-steps", "100"], False),
    ("item_per_step", "examples/check/item_per_step.py", [], False),
    ("tiny_ops", "examples/check/tiny_ops.py", [], False),
    (
        "recompiling_shapes",
        "examples/check/recompiling_shapes.py",
        ["--warmup", "2", "--prove-steps", "6", "--rounds", "6"],
        False,
    ),
    ("well_tuned", "examples/fix/well_tuned.py", [], False),
]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [e.get("PYTHONPATH")])])
    e["OMP_NUM_THREADS"] = "1"
    return e


def td(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchdoctor", *args],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
    )


def run_case(
    name: str, example: str, extra: list[str], anomaly: bool, rounds: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-fix-{name}-") as tmp:
        cwd = Path(tmp)
        script = cwd / Path(example).name
        shutil.copy(REPO / example, script)
        check = td(cwd, "check", "--warmup", "3", "--steps", "3", "--out", "runs", script.name)
        if check.returncode != 0:
            raise SystemExit(f"{name}: check failed: {check.stderr[-1000:]}")
        (folder,) = (cwd / "runs").iterdir()
        if anomaly:
            report = json.loads((folder / "report.json").read_text())
            report["findings"].append(
                {"id": "anomaly-detection", "title": "anomaly mode on", "evidence": {}}
            )
            (folder / "report.json").write_text(json.dumps(report))
        args = [
            "fix",
            "--from",
            str(folder),
            "--prove",
            "--rounds",
            str(rounds),
            "--json",
            "fix.json",
            *extra,
        ]
        r = td(cwd, *args)
        if r.returncode != 0:
            raise SystemExit(f"{name}: fix failed: {r.stderr[-2000:]}")
        return json.loads((cwd / "fix.json").read_text())


def fmt_measured(m: dict[str, Any] | None) -> str:
    if not m:
        return "-"
    if m["low"] is None or m["high"] is None:
        return f"{m['ratio']:.2f}x [?]"
    return f"{m['ratio']:.2f}x [{m['low']:.2f}-{m['high']:.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--rounds", type=int, default=8)
    a = ap.parse_args()
    wanted = {x for x in a.only.split(",") if x}
    rows, ratios, proven, total = [], [], 0, 0
    for name, example, extra, anomaly in CASES:
        if wanted and name not in wanted:
            continue
        doc = run_case(name, example, extra, anomaly, a.rounds)
        changes = [c for c in doc["changes"] if c["status"] not in ("refused", "already")]
        if not changes:
            rows.append((name, "(empty patch)", "-", "-", "-", "-"))
        for c in changes:
            total += 1
            proven += c["status"] == "patched"
            pred = c["predicted"]["speedup"]
            m = c["measured"]
            fid = c["fidelity"] or {}
            fid_text = (
                "-"
                if not fid
                else ("ok" if fid["ok"] else "REJECTED") + f" ({fid.get('max_rel_dev') or 0:.1e})"
            )
            rows.append(
                (
                    name,
                    f"{c['finding']} -> {c['codemod']}",
                    f"{pred:.2f}x" if pred else "-",
                    fmt_measured(m),
                    fid_text,
                    c["status"],
                )
            )
            if pred and m:
                ratios.append(m["ratio"] / pred)
        for c in doc["changes"]:
            if c["status"] in ("refused", "already"):
                rows.append(
                    (
                        name,
                        f"{c['finding']} -> {c['codemod']}",
                        "-",
                        "-",
                        "-",
                        f"{c['status']}: {c['reason'][:60]}",
                    )
                )
    head = ("case", "change", "predicted", "measured [95%]", "losses", "status")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print(" | ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)))
    med = statistics.median(ratios) if ratios else float("nan")
    print(f"proven {proven} of {total} changes; measured/predicted speed-up, median {med:.2f}")


if __name__ == "__main__":
    main()
