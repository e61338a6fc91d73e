"""``fused-optimizer`` applied to a real script and run: ``examples/check/tiny_ops.py`` steps
``Adam(..., foreach=False)``, a Python loop over 80 parameter tensors every step. ``check``
names it (``host-bound``), ``fix`` plans the change from that run, the change alone is written
into a copy of the script, and both versions run under a harness that counts which of Adam's
implementations each step took and records the losses: the per-tensor loop is gone (every
step fused), and the script still trains, with the original's losses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fix.patched import REPO, check_and_patch, harnessed_both

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


@pytest.mark.slow
def test_fused_optimizer_patch_runs_fused_and_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(REPO / "examples" / "check" / "tiny_ops.py", tmp_path / "tiny_ops.py")
    shutil.copy(tmp_path / "tiny_ops.py", tmp_path / "original.py")
    (tmp_path / "harness.py").write_text(HARNESS)
    check_and_patch(
        tmp_path, monkeypatch, "tiny_ops.py", ("host-bound",), "fused-optimizer", ("--steps", "40")
    )  # the change alone: host-bound also proposes a compile
    text = (tmp_path / "tiny_ops.py").read_text()
    # the runs have one intra-op thread (tests/fix/patched.py): fused; with more, foreach
    assert "fused=True" in text and "foreach=False" not in text

    steps = ("--steps", str(STEPS))
    (before, _), (after, _) = harnessed_both(
        tmp_path, "harness.py", "original.py", "tiny_ops.py", *steps
    )
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
