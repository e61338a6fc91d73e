"""Run the vendored public training scripts (tests/public/) under ``torchdoctor check`` and print
one markdown row per script: the top finding (the first warning or critical one), its share of the
step, the verdict, the exit status and the check process's peak resident memory (sampled).

    python scripts/public_scripts_table.py                       # this checkout's torchdoctor
    python scripts/public_scripts_table.py --src /tmp/old/src    # another version (the "before")
    python scripts/public_scripts_table.py --only nanogpt mingpt_adder

Each script runs in a fresh folder with its synthetic data (nothing is downloaded), one thread
(``OMP_NUM_THREADS=1``: the machine is shared; the oversubscription finding has its own tests).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.public.scripts import SCRIPTS, WINDOWS, prepare  # noqa: E402


def _top(report: dict) -> str:
    for f in report.get("findings") or []:
        if f.get("severity") in ("warning", "critical"):
            share = f.get("share_of_step") or 0.0
            title = f["title"].replace("|", "\\|")
            return f"`{f['id']}`, {f['severity']} ({share:.0%}): {title}"
    return "none"


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def _watch(proc: subprocess.Popen[bytes], cap_mib: float, timeout_s: float) -> tuple[str, float]:
    """Wait for ``proc``, sampling its resident memory every 0.2 s; kill it when that passes
    ``cap_mib`` or it runs past ``timeout_s`` (the old version's unbounded profiler must not
    take a shared machine down). Returns why it was killed ("" if not) and the peak MiB seen."""
    t0, peak = time.perf_counter(), 0.0
    while proc.poll() is None:
        peak = max(peak, _rss_mib(proc.pid))
        if peak > cap_mib:
            proc.kill()
            proc.wait()
            return f"killed at the {cap_mib:.0f} MiB cap", peak
        if time.perf_counter() - t0 > timeout_s:
            proc.kill()
            proc.wait()
            return f"killed after {timeout_s:.0f} s", peak
        time.sleep(0.2)
    return "", peak


def run_one(
    name: str, src: Path, work: Path, cap_mib: float = 6144, timeout_s: float = 900
) -> dict[str, object]:
    """Check one script with the torchdoctor in ``src``; its top finding, verdict, exit status,
    wall seconds and the check process's peak resident memory (MiB)."""
    script, args, env_extra = prepare(name, work / name)
    out = work / f"runs-{name}"
    env = {**os.environ, **env_extra, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torchdoctor", "check", *WINDOWS.get(name, [])]
    cmd += ["--out", str(out), script, *args]
    t0 = time.perf_counter()
    with open(work / f"{name}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=work / name, env=env, stdout=log, stderr=log)
        killed, peak = _watch(proc, cap_mib, timeout_s)
    wall = time.perf_counter() - t0
    row: dict[str, object] = {"script": name, "exit": killed or proc.returncode}
    row["wall_s"], row["peak_mib"] = round(wall, 1), round(peak)
    folders = [p for p in out.iterdir() if p.is_dir()] if out.is_dir() else []
    report = folders[0] / "report.json" if len(folders) == 1 else None
    if report is not None and report.is_file():
        doc = json.loads(report.read_text())
        row["top"], row["verdict"] = _top(doc), doc.get("verdict") or ""
    else:
        row["top"], row["verdict"] = "no report", ""
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=REPO / "src", help="the torchdoctor to run")
    ap.add_argument("--only", nargs="*", default=list(SCRIPTS), choices=list(SCRIPTS))
    ap.add_argument("--work", type=Path, help="keep the run folders here (default: a temp dir)")
    ap.add_argument("--cap-mib", type=float, default=6144, help="kill a check above this RSS")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON lines too")
    opts = ap.parse_args()
    work = opts.work or Path(tempfile.mkdtemp(prefix="td-public-"))
    print(f"torchdoctor from {opts.src.resolve()}; run folders under {work}")
    print("| script | top finding | verdict | exit | peak MiB | wall s |")
    print("|---|---|---|---|---|---|")
    for name in opts.only:
        row = run_one(name, opts.src.resolve(), work, opts.cap_mib)
        print(
            f"| {name} | {row['top']} | {row['verdict']} | {row['exit']} | {row['peak_mib']} "
            f"| {row['wall_s']} |",
            flush=True,
        )
        if opts.json:
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
