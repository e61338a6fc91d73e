"""What ``torchdoctor fix`` does to each script of ``examples/unlisted`` (mistakes no remedy was
written against): whether it patches, whether the patched script still runs to its end, and
whether ``check`` on the patched script still names the planted mistake.

    python benchmarks/validate_fix_unlisted.py                       # every case
    python benchmarks/validate_fix_unlisted.py --cases gc_every_step.py,eval_with_grad.py
    python benchmarks/validate_fix_unlisted.py --set heldout   # examples/heldout

Each case is copied to a scratch folder (nothing in the repository is written); every run is a
fresh process with the case's environment (a healthy control: the environment's threads, see
``unlisted_cases.harness_env``). Per case: ``fix --write`` (it runs ``check`` first
and applies what it proposes), the patched script run plainly with a time limit, then ``check``
on it. The patched script runs under ``scripts/patched_run.py``, which also says whether each
patch's statement ran at all (code after a ``return`` never does). A patch "fails" when the
patched script exits non-zero where the original did not; a
mistake is "gone" when none of the case's expected finding ids is actionable any more. Healthy
controls must get no patch. The last line is the headline.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from unlisted_cases import CASES, Case, harness_env, run_case

SRC = Path(__file__).resolve().parents[1] / "src"
RUNNER = SRC.parent / "scripts" / "patched_run.py"
FAST = ["--warmup", "3", "--steps", "3"]


def _run(cmd: list[str], case: Case, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return run_case(cmd, case, cwd, timeout, SRC)


def _actionable(out: Path) -> list[str] | None:
    folders = sorted(p for p in out.iterdir() if p.is_dir())
    if not folders or not (folders[-1] / "report.json").is_file():
        return None
    report = json.loads((folders[-1] / "report.json").read_text())
    return [
        f["id"]
        for f in report.get("findings") or []
        if f["severity"] != "info" and (f.get("saving_ms_per_step") or 0) > 0
    ]


def one(case: Case, timeout: float) -> dict[str, Any]:
    """The row of one case (see the module docstring)."""
    case = harness_env(case)  # a control with the environment's threads
    work = Path(tempfile.mkdtemp(prefix="td-fix-unlisted-"))
    script = work / case.script
    shutil.copy(case.path, script)
    for helper in case.path.parent.glob("_*.py"):  # the cases' shared helpers (_ab.py)
        shutil.copy(helper, work / helper.name)
    py = sys.executable
    plain = _run([py, str(script)], case, work, timeout)
    fix_json = work / "fix.json"
    fixed = _run(
        [py, "-m", "torchdoctor", "fix", "--write", "--json", str(fix_json), *FAST,
         "--out", str(work / "runs"), str(script)],
        case, work, timeout,
    )  # fmt: skip
    row: dict[str, Any] = {
        "script": case.script,
        "control": case.control,
        "plain_rc": plain.returncode,
    }
    changes = []
    if fix_json.is_file():
        doc = json.loads(fix_json.read_text())
        changes = [
            f"{c.get('finding')}->{c.get('codemod')}"
            for c in doc.get("changes") or []
            if c.get("status") == "patched"
        ]
    row["fix_rc"] = fixed.returncode
    row["patched"] = changes
    if not changes:
        return row
    # the patched script under scripts/patched_run.py: also whether each patch's statement ran
    ran_json = work / "ran.json"
    runner = [py, str(RUNNER), "--fix", str(fix_json), "--out", str(ran_json)]
    after = _run([*runner, str(script)], case, work, timeout)
    ran = json.loads(ran_json.read_text()) if ran_json.is_file() else []
    row["never_ran"] = [r["summary"] for r in ran if not r.get("ran")]
    row["patched_rc"] = after.returncode
    row["patch_fails"] = after.returncode != 0 and plain.returncode == 0
    if row["patch_fails"]:
        row["error"] = after.stderr.strip().splitlines()[-1:] if after.stderr else []
    recheck = work / "recheck"
    recheck.mkdir()
    _run(
        [py, "-m", "torchdoctor", "check", *FAST, "--out", str(recheck), str(script)],
        case,
        work,
        timeout,
    )
    ids = _actionable(recheck)
    row["after_ids"] = ids
    row["gone"] = ids is not None and not any(i in case.expect for i in ids)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="", help="comma-separated script names (default: all)")
    ap.add_argument(
        "--set", default="unlisted", choices=("unlisted", "heldout"), help="examples/<set>"
    )
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--json", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    cases = CASES
    if args.set == "heldout":
        from heldout_cases import CASES as cases
    wanted = {c for c in args.cases.split(",") if c}
    unknown = wanted - {c.script for c in cases}
    if unknown:
        print(f"unknown case(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    rows = [one(c, args.timeout) for c in cases if not wanted or c.script in wanted]
    print(f"{'case':<28} {'patch':<48} {'runs':<6} {'mistake gone'}")
    for r in rows:
        patch = ", ".join(r["patched"]) or ("(none: control)" if r["control"] else "(none)")
        runs = "-" if "patched_rc" not in r else ("FAIL" if r["patch_fails"] else "ok")
        if r.get("never_ran"):
            runs += f" ({len(r['never_ran'])} never ran)"
        gone = "-" if "gone" not in r else ("yes" if r["gone"] else f"no {r['after_ids']}")
        print(f"{r['script']:<28} {patch[:48]:<48} {runs:<6} {gone}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    patched = [r for r in rows if r["patched"] and not r["control"]]
    fails = sum(1 for r in patched if r.get("patch_fails"))
    never = sum(len(r.get("never_ran") or []) for r in rows)
    gone = sum(1 for r in patched if r.get("gone"))
    noisy = sum(1 for r in rows if r["control"] and r["patched"])
    print(
        f"patched {len(patched)} of {sum(1 for r in rows if not r['control'])} mistakes; "
        f"{fails} patches fail to run; {never} never ran; mistake gone after {gone} of "
        f"{len(patched)}; "
        f"controls patched {noisy}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
