"""``fused-optimizer`` applied to a real script and run: ``examples/check/tiny_ops.py`` steps
``Adam(..., foreach=False)``, a Python loop over 80 parameter tensors every step. ``check``
names it (``host-bound``), ``fix`` plans the change from that run, the change alone is written
into a copy of the script, and both versions run under a harness that counts which of Adam's
implementations each step took and records the losses: the per-tensor loop is gone (every
step fused), and the script still trains, with the original's losses."""

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
STEPS = 20

HARNESS = """
import json, runpy, sys

import torch
import torch.optim.adam as adam

calls = {"_single_tensor_adam": 0, "_multi_tensor_adam": 0, "_fused_adam": 0}
for name in calls:  # adam() picks its implementation from these module globals at each step
    def counted(*a, _f=getattr(adam, name), _n=name, **k):
        calls[_n] += 1
        return _f(*a, **k)
    setattr(adam, name, counted)
losses = []
backward = torch.Tensor.backward
def recording(self, *a, **k):
    losses.append(float(self.detach()))
    return backward(self, *a, **k)
torch.Tensor.backward = recording
torch.manual_seed(0)  # the script draws its batch unseeded: the same batch in both runs
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print("HARNESS " + json.dumps({"calls": calls, "losses": losses}))
"""


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [e.get("PYTHONPATH")])])
    e["OMP_NUM_THREADS"] = "1"
    return e


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env(), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def harnessed(cwd: Path, script: str) -> dict[str, Any]:
    out = run(cwd, "harness.py", script, "--steps", str(STEPS)).stdout
    line = next(t for t in out.splitlines() if t.startswith("HARNESS "))
    return json.loads(line[len("HARNESS ") :])


@pytest.mark.slow
def test_fused_optimizer_patch_runs_fused_and_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchdoctor.fix import planner
    from torchdoctor.fix.cli import run_fix
    from torchdoctor.fix.options import FixOptions

    shutil.copy(REPO / "examples" / "check" / "tiny_ops.py", tmp_path / "tiny_ops.py")
    shutil.copy(tmp_path / "tiny_ops.py", tmp_path / "original.py")
    (tmp_path / "harness.py").write_text(HARNESS)
    run(tmp_path, "-m", "torchdoctor", "check", "--warmup", "3", "--steps", "3", "--out", "runs",
        "tiny_ops.py", "--steps", "40")  # fmt: skip
    (folder,) = (tmp_path / "runs").iterdir()
    monkeypatch.chdir(tmp_path)
    result = run_fix(None, [], str(folder), FixOptions(only=("host-bound",)))
    (change,) = [c for c in result.plan.changes if c.codemod == "fused-optimizer"]
    assert change.status == "patched", change.reason
    files, _ = planner.compose(result.plan, [change])  # this change alone, not the compile
    (path,) = files
    Path(path).write_text(files[path])
    text = (tmp_path / "tiny_ops.py").read_text()
    assert "fused=True" in text and "foreach=False" not in text

    before, after = harnessed(tmp_path, "original.py"), harnessed(tmp_path, "tiny_ops.py")
    # the planted loop: every step in the per-tensor implementation; patched: every step fused
    assert before["calls"] == {
        "_single_tensor_adam": STEPS,
        "_multi_tensor_adam": 0,
        "_fused_adam": 0,
    }
    assert after["calls"] == {
        "_single_tensor_adam": 0,
        "_multi_tensor_adam": 0,
        "_fused_adam": STEPS,
    }
    # it still trains, and as the original did (the fused kernel's arithmetic is Adam's)
    assert len(after["losses"]) == STEPS and after["losses"][-1] < after["losses"][0]
    assert after["losses"] == pytest.approx(before["losses"], rel=1e-4)
