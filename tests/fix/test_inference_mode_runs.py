"""``inference-mode`` applied to a real script and run: ``examples/unlisted/eval_with_grad.py``
evaluates a classifier with autograd recording every forward. ``check`` names it
(``grad-without-backward``), ``fix`` plans the change from that run, and the patched copy runs
under a harness that watches each forward of the model: none records autograd any more, and the
evaluation prints the original's accuracy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
UNLISTED = REPO / "examples" / "unlisted"
STEPS = 6

HARNESS = """
import json, runpy, sys

import torch

forwards = []
def watch(module, args, out):
    if type(module) is torch.nn.Sequential and len(module) > 2:  # the classifier itself
        forwards.append({"grad": torch.is_grad_enabled(), "records": out.requires_grad})
torch.nn.modules.module.register_module_forward_hook(watch)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print("HARNESS " + json.dumps(forwards))
"""


def env() -> dict[str, str]:
    e = dict(os.environ)
    path = [str(REPO / "src"), str(UNLISTED), *filter(None, [e.get("PYTHONPATH")])]
    e["PYTHONPATH"] = os.pathsep.join(path)  # the script imports its step timer, _ab
    e["OMP_NUM_THREADS"] = "1"
    return e


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env(), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def harnessed(cwd: Path, script: str) -> tuple[list[dict[str, Any]], str]:
    out = run(cwd, "harness.py", script, "--steps", str(STEPS)).stdout
    line = next(t for t in out.splitlines() if t.startswith("HARNESS "))
    accuracy = next(t for t in out.splitlines() if t.startswith("accuracy "))
    return json.loads(line[len("HARNESS ") :]), accuracy


@pytest.mark.slow
def test_inference_mode_patch_stops_recording_and_evaluates_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchdoctor.fix import planner
    from torchdoctor.fix.cli import run_fix
    from torchdoctor.fix.options import FixOptions

    shutil.copy(UNLISTED / "eval_with_grad.py", tmp_path / "eval_with_grad.py")
    shutil.copy(tmp_path / "eval_with_grad.py", tmp_path / "original.py")
    (tmp_path / "harness.py").write_text(HARNESS)
    run(tmp_path, "-m", "torchdoctor", "check", "--warmup", "3", "--steps", "4", "--out", "runs",
        "eval_with_grad.py", "--steps", "40")  # fmt: skip
    (folder,) = (tmp_path / "runs").iterdir()
    monkeypatch.chdir(tmp_path)
    result = run_fix(None, [], str(folder), FixOptions(only=("grad-without-backward",)))
    (change,) = [c for c in result.plan.changes if c.codemod == "inference-mode"]
    assert change.status == "patched", change.reason
    files, _ = planner.compose(result.plan, [change])
    (path,) = files
    Path(path).write_text(files[path])
    assert "torch.inference_mode()" in (tmp_path / "eval_with_grad.py").read_text()

    before, accuracy_before = harnessed(tmp_path, "original.py")
    after, accuracy_after = harnessed(tmp_path, "eval_with_grad.py")
    # the planted mistake: every forward recorded a graph; patched, none does
    assert len(before) == len(after) == STEPS
    assert all(f["grad"] and f["records"] for f in before), before
    assert not any(f["grad"] or f["records"] for f in after), after
    assert accuracy_after == accuracy_before  # the same predictions
