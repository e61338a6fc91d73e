"""Run the vendored public training scripts (tests/public/) under ``torchdoctor check`` and print
one markdown row per script: the top finding (the first warning or critical one), its share of the
step, the verdict, the exit status and the check process's peak resident memory (sampled).

    python scripts/public_scripts_table.py                       # this checkout's torchdoctor
    python scripts/public_scripts_table.py --src /tmp/old/src    # another version (the "before")
    python scripts/public_scripts_table.py --only nanogpt mingpt_adder

Each script runs in a fresh folder with its synthetic data (nothing is downloaded), one thread
(``OMP_NUM_THREADS=1``: the machine is shared; the oversubscription finding has its own tests).

With ``--fix`` each row goes on: ``fix --from RUN --write`` on the script's own copy, then the
patched script run plainly (``scripts/patched_run.py``: whether each patch's statement ran at
all) with columns patched/refused, patches that never ran, the patched run's exit status, and
patches whose ``name=value`` arguments the finding's printed remedy does not have (or, for a
change that takes arguments out, still has): a patch that says other than the report.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
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
    """Resident MiB of ``pid`` and every process under it: check runs the script in a child of
    a watching parent, so the parent alone reads a few MiB."""
    total, todo, seen = 0.0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/statm", encoding="ascii") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children", encoding="ascii") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError, IndexError):
            continue
    return total


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """Kill the check and the script it runs (its own session: started that way below)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()


def _watch(proc: subprocess.Popen[bytes], cap_mib: float, timeout_s: float) -> tuple[str, float]:
    """Wait for ``proc``, sampling its resident memory every 0.2 s; kill it when that passes
    ``cap_mib`` or it runs past ``timeout_s`` (the old version's unbounded profiler must not
    take a shared machine down). Returns why it was killed ("" if not) and the peak MiB seen."""
    t0, peak = time.perf_counter(), 0.0
    while proc.poll() is None:
        peak = max(peak, _rss_mib(proc.pid))
        if peak > cap_mib:
            _kill_tree(proc)
            proc.wait()
            return f"killed at the {cap_mib:.0f} MiB cap", peak
        if time.perf_counter() - t0 > timeout_s:
            _kill_tree(proc)
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
        proc = subprocess.Popen(
            cmd, cwd=work / name, env=env, stdout=log, stderr=log, start_new_session=True
        )
        killed, peak = _watch(proc, cap_mib, timeout_s)
    wall = time.perf_counter() - t0
    row: dict[str, object] = {"script": name, "exit": killed or proc.returncode}
    row["_prepared"] = (script, args, env_extra)
    row["wall_s"], row["peak_mib"] = round(wall, 1), round(peak)
    folders = [p for p in out.iterdir() if p.is_dir()] if out.is_dir() else []
    report = folders[0] / "report.json" if len(folders) == 1 else None
    if report is not None and report.is_file():
        doc = json.loads(report.read_text())
        row["top"], row["verdict"] = _top(doc), doc.get("verdict") or ""
        row["_run"] = report.parent
    else:
        row["top"], row["verdict"] = "no report", ""
    return row


def _disagrees(summary: str, remedy: str) -> bool:
    """A codemod's summary against the finding's printed remedy: every ``name=value`` it sets
    is in the remedy, and no argument it takes out (``DataLoader(without a, b)``) is there."""
    dropped = re.search(r"without ([\w, ]+)\)", summary)
    if dropped:
        first = remedy.splitlines()[0] if remedy else ""
        return any(f"{n.strip()}=" in first for n in dropped.group(1).split(","))
    pairs = re.findall(r"(\w+=[^,()]+)", summary)
    flat = remedy.replace(" ", "")
    return any(p.replace(" ", "") not in flat for p in pairs)


def fix_one(name: str, src: Path, work: Path, checked: dict, timeout_s: float = 900) -> dict:
    """``fix --from RUN --write`` on the copy the check ran (its sites name those files),
    then the patched script under ``patched_run.py``: what was patched, refused, never ran,
    the exit status, and the patches that say other than the report's remedy."""
    run: Path = checked["_run"]
    script, args, env_extra = checked["_prepared"]
    env = {**os.environ, **env_extra, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    fix_json, ran_json = work / f"{name}-fix.json", work / f"{name}-ran.json"
    cmd = [sys.executable, "-m", "torchdoctor", "fix", "--from", str(run), "--write"]
    subprocess.run(
        [*cmd, "--json", str(fix_json)], cwd=work / name, env=env, capture_output=True,
        timeout=timeout_s,
    )  # fmt: skip
    doc = json.loads(fix_json.read_text()) if fix_json.is_file() else {}
    changes = [c for c in doc.get("changes") or [] if isinstance(c, dict)]
    patched = [c for c in changes if c.get("status") == "patched"]
    report = json.loads((run / "report.json").read_text())
    remedies = {f["id"]: str(f.get("fix") or "") for f in report.get("findings") or []}
    row: dict = {
        "patched": [str(c.get("summary")) for c in patched],
        "refused": sum(1 for c in changes if c.get("status") == "refused"),
        "disagree": [
            str(c.get("summary"))
            for c in patched
            if _disagrees(str(c.get("summary") or ""), remedies.get(str(c.get("finding")), ""))
        ],
    }
    runner = REPO / "scripts" / "patched_run.py"
    cmd = [sys.executable, str(runner), "--fix", str(fix_json), "--out", str(ran_json)]
    with open(work / f"{name}-patched.log", "w") as log:
        proc = subprocess.run(
            [*cmd, script, *args], cwd=work / name, env=env, stdout=log, stderr=log,
            timeout=timeout_s,
        )  # fmt: skip
    ran = json.loads(ran_json.read_text()) if ran_json.is_file() else []
    row["never_ran"] = [r["summary"] for r in ran if not r.get("ran")]
    row["patched_exit"] = proc.returncode
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=REPO / "src", help="the torchdoctor to run")
    ap.add_argument("--only", nargs="*", default=list(SCRIPTS), choices=list(SCRIPTS))
    ap.add_argument("--work", type=Path, help="keep the run folders here (default: a temp dir)")
    ap.add_argument("--cap-mib", type=float, default=6144, help="kill a check above this RSS")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON lines too")
    ap.add_argument("--fix", action="store_true", help="then fix --write, run the patched script")
    opts = ap.parse_args()
    work = opts.work or Path(tempfile.mkdtemp(prefix="td-public-"))
    print(f"torchdoctor from {opts.src.resolve()}; run folders under {work}")
    head = "| script | top finding | verdict | exit | peak MiB | wall s |"
    if opts.fix:
        head += " patched | refused | never ran | patched exit | says other than the report |"
    print(head)
    print("|---" * head.count(" | ") + "|---|")
    totals = {"patched": 0, "never_ran": 0, "failed": 0, "disagree": 0}
    for name in opts.only:
        row = run_one(name, opts.src.resolve(), work, opts.cap_mib)
        line = (
            f"| {name} | {row['top']} | {row['verdict']} | {row['exit']} | {row['peak_mib']} "
            f"| {row['wall_s']} |"
        )
        if opts.fix and "_run" in row:
            fixed = fix_one(name, opts.src.resolve(), work, row)
            row.update(fixed)
            line += (
                f" {', '.join(fixed['patched']) or '-'} | {fixed['refused']} "
                f"| {', '.join(fixed['never_ran']) or '-'} | {fixed['patched_exit']} "
                f"| {', '.join(fixed['disagree']) or '-'} |"
            )
            totals["patched"] += len(fixed["patched"])
            totals["never_ran"] += len(fixed["never_ran"])
            totals["failed"] += int(fixed["patched_exit"] != 0 and row["exit"] == 0)
            totals["disagree"] += len(fixed["disagree"])
        print(line, flush=True)
        if opts.json:
            shown = {k: v for k, v in row.items() if not k.startswith("_")}
            print(json.dumps(shown), flush=True)
    if opts.fix:
        print(
            f"\n{totals['patched']} patches; {totals['failed']} patched scripts that fail to "
            f"run; {totals['never_ran']} patches that never ran; {totals['disagree']} that say "
            "other than the report"
        )


if __name__ == "__main__":
    main()
