"""``inference-mode`` applied to a real script and run: ``examples/unlisted/eval_with_grad.py``
evaluates a classifier with autograd recording every forward. ``check`` names it
(``grad-without-backward``), ``fix`` plans the change from that run, and the patched copy runs
under a harness that watches each forward of the model: none records autograd any more, and the
evaluation prints the original's accuracy."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fix.patched import REPO, check_and_patch, harnessed_both

UNLISTED = REPO / "examples" / "unlisted"  # the scripts import their step timer, _ab
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


def accuracy(out: str) -> str:
    return next(t for t in out.splitlines() if t.startswith("accuracy "))


@pytest.mark.slow
def test_inference_mode_patch_stops_recording_and_evaluates_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(UNLISTED / "eval_with_grad.py", tmp_path / "eval_with_grad.py")
    shutil.copy(tmp_path / "eval_with_grad.py", tmp_path / "original.py")
    (tmp_path / "harness.py").write_text(HARNESS)
    check_and_patch(
        tmp_path,
        monkeypatch,
        "eval_with_grad.py",
        ("grad-without-backward",),
        "inference-mode",
        ("--steps", "40"),
        paths=(UNLISTED,),
    )
    assert "torch.inference_mode()" in (tmp_path / "eval_with_grad.py").read_text()

    steps = ("--steps", str(STEPS))
    (before, out_before), (after, out_after) = harnessed_both(
        tmp_path, "harness.py", "original.py", "eval_with_grad.py", *steps, paths=(UNLISTED,)
    )
    # the planted mistake: every forward recorded a graph; patched, none does
    assert len(before) == len(after) == STEPS
    assert all(f["grad"] and f["records"] for f in before), before
    assert not any(f["grad"] or f["records"] for f in after), after
    assert accuracy(out_after) == accuracy(out_before)  # the same predictions
