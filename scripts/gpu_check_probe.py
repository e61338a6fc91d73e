"""The GPU check's probe-effect section: a GPT-2-shaped model and a small character model, each
run plain and under ``torchdoctor check``, interleaved (plain, check, plain), and judged on what
the report says against the script's own clock.

    python scripts/gpu_check_probe.py WORK

Evidence per shape: the plain step (ms) of each plain run, the report's step (the clean
window's median), the profiled window's ratio, the GPU's busy time per step, the host lead,
the top finding and host-bound's saving. ``gpu_check_judge.judge_probe`` decides.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check_judge as judge

CASE = Path(__file__).resolve().parent / "gpu_check_cases" / "gpt_shape.py"
PY = os.environ.get("PY", sys.executable)


def _plain(shape: str, log: Any) -> float | None:
    done = subprocess.run(
        [PY, str(CASE), "--shape", shape, "--steps", "40"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    log.write(done.stdout + done.stderr)
    for line in done.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            return float(json.loads(line.split(" ", 1)[1])["step_ms"])
    return None


def _check(shape: str, runs: Path, log: Any) -> dict[str, Any]:
    cmd = [PY, "-m", "torchdoctor", "check", "--out", str(runs), str(CASE)]
    done = subprocess.run(
        [*cmd, "--shape", shape, "--steps", "60"],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    log.write(done.stdout + done.stderr)
    reports = sorted(runs.glob("*/report.json"))
    if not reports:
        return {"rc": done.returncode, "error": "no report.json"}
    doc = json.loads(reports[-1].read_text())
    effect = doc.get("probe_effect") or {}
    findings = [f for f in doc.get("findings") or [] if f.get("severity") != "info"]
    host = next((f for f in doc.get("findings") or [] if f.get("id") == "host-bound"), None)
    profiled = next((w for w in effect.get("windows") or [] if w.get("name") == "profiled"), {})
    return {
        "rc": done.returncode,
        "reported_ms": effect.get("clean_ms"),
        "clock": effect.get("clock"),
        "profiled_ratio": profiled.get("ratio"),
        "gpu_busy_ms": effect.get("gpu_busy_ms"),
        "gpu_busy_source": effect.get("gpu_busy_source"),
        "kernels_ratio": next(
            (w.get("ratio") for w in effect.get("windows") or [] if w.get("name") == "kernels"),
            None,
        ),
        "host_lead_ms": effect.get("host_lead_ms"),
        "gpu_bound": effect.get("gpu_bound"),
        "top": findings[0]["id"] if findings else None,
        "host_bound_saving_ms": host.get("saving_ms_per_step") if host else None,
        "verdict": doc.get("verdict"),
        "changed": effect.get("changed"),
    }


def collect(work: Path) -> dict[str, Any]:
    evidence: dict[str, Any] = {}
    with (work / "probe-runs.log").open("w") as log:
        for shape in ("gpt2", "char"):
            plain_a = _plain(shape, log)
            checked = _check(shape, work / f"runs-probe-{shape}", log)
            plain_b = _plain(shape, log)
            evidence[shape] = {"plain_ms": [plain_a, plain_b], **checked}
    return evidence


def main(argv: list[str]) -> int:
    work = Path(argv[0])
    t0 = time.monotonic()
    try:
        evidence = collect(work)
    except Exception as exc:  # the verdict says what failed
        evidence = {"error": f"{type(exc).__name__}: {exc}"}
    out = judge.write(work, "probe", evidence, time.monotonic() - t0)
    print(f"probe {'PASS' if out['pass'] else 'FAIL'}  {out['figure']}", flush=True)
    return 0 if out["pass"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
