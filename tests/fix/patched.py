"""Shared by the tests that run a codemod's patch on a real script: ``check`` the script in a
fresh process, plan the fix from that run folder as ``fix --from`` does, write one codemod's
change alone into the script, and run scripts under a harness that prints one JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def env(*paths: Path) -> dict[str, str]:
    """The environment of the runs: this checkout's sources (and ``paths``) importable, one
    intra-op thread (the change is the subject, not the thread count)."""
    e = dict(os.environ)
    found = [str(REPO / "src"), *map(str, paths), *filter(None, [e.get("PYTHONPATH")])]
    e["PYTHONPATH"] = os.pathsep.join(found)
    e["OMP_NUM_THREADS"] = "1"
    return e


def run(cwd: Path, *args: str, paths: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in ``cwd``; it must exit 0."""
    r = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env(*paths),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def check_and_patch(
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    script: str,
    findings: tuple[str, ...],
    codemod: str,
    args: tuple[str, ...] = (),
    paths: tuple[Path, ...] = (),
) -> Any:
    """Check ``tmp/script`` (run with ``args``), plan ``fix --only findings`` from the run,
    write ``codemod``'s change alone into the script; the change."""
    from torchdoctor.fix import planner
    from torchdoctor.fix.cli import run_fix
    from torchdoctor.fix.options import FixOptions

    run(tmp, "-m", "torchdoctor", "check", "--warmup", "3", "--steps", "4", "--out", "runs",
        script, *args, paths=paths)  # fmt: skip
    (folder,) = (tmp / "runs").iterdir()
    monkeypatch.chdir(tmp)
    result = run_fix(None, [], str(folder), FixOptions(only=findings))
    (change,) = [c for c in result.plan.changes if c.codemod == codemod]
    assert change.status == "patched", change.reason
    files, _ = planner.compose(result.plan, [change])  # this change alone
    (path,) = files
    Path(path).write_text(files[path])
    return change


def harnessed(
    cwd: Path, harness: str, script: str, *args: str, paths: tuple[Path, ...] = ()
) -> tuple[Any, str]:
    """Run ``script`` under ``harness`` (a file in ``cwd``); its ``HARNESS {json}`` line, parsed,
    and the whole standard output."""
    out = run(cwd, harness, script, *args, paths=paths).stdout
    line = next(t for t in out.splitlines() if t.startswith("HARNESS "))
    return json.loads(line[len("HARNESS ") :]), out


def harnessed_both(
    cwd: Path, harness: str, before: str, after: str, *args: str, paths: tuple[Path, ...] = ()
) -> tuple[tuple[Any, str], tuple[Any, str]]:
    """``harnessed`` for the original and the patched script, run at the same time (the
    harness counts calls and records losses, no times, so neither run disturbs the other's
    result; on two cores they take the time of one)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        runs = [
            pool.submit(harnessed, cwd, harness, s, *args, paths=paths) for s in (before, after)
        ]
        return runs[0].result(), runs[1].result()
