"""``mark-dynamic`` applied to a real script and run: ``examples/check/recompiling_shapes.py``
compiles its model with ``dynamic=False`` and feeds a new sequence length almost every step, so
dynamo recompiles until its limit. ``check`` records the failing guard (``recompiles``), ``fix``
plans ``mark_dynamic`` on that argument from the run, and both versions run under a harness
that counts dynamo's graphs and records the losses: one graph instead of one per length up to
the limit, the same losses. The dynamo-only ``eager`` backend keeps it fast (the guards, and so
the recompiles, are dynamo's whatever the backend)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fix.patched import REPO, check_and_patch, harnessed_both

STEPS = 30
EAGER = ("--backend", "eager")

HARNESS = """
import json, runpy, sys

import torch

losses = []
backward = torch.Tensor.backward
def recording(self, *a, **k):
    losses.append(float(self.detach()))
    return backward(self, *a, **k)
torch.Tensor.backward = recording
torch.manual_seed(0)  # the script draws its tokens unseeded: the same batches in both runs
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
from torch._dynamo.utils import counters
print("HARNESS " + json.dumps({"graphs": counters["stats"]["unique_graphs"], "losses": losses}))
"""


@pytest.mark.slow
def test_mark_dynamic_patch_compiles_one_graph_and_trains_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(REPO / "examples" / "check" / "recompiling_shapes.py", tmp_path / "shapes.py")
    shutil.copy(tmp_path / "shapes.py", tmp_path / "original.py")
    (tmp_path / "harness.py").write_text(HARNESS)
    check_and_patch(
        tmp_path,
        monkeypatch,
        "shapes.py",
        ("recompiles", "recompile-limit-hit"),
        "mark-dynamic",
        ("--steps", "40", *EAGER),
    )
    assert "torch._dynamo.mark_dynamic(tokens, 1)" in (tmp_path / "shapes.py").read_text()

    args = ("--steps", str(STEPS), *EAGER)
    (before, _), (after, _) = harnessed_both(
        tmp_path, "harness.py", "original.py", "shapes.py", *args
    )
    # the planted mistake: a graph per new length until the recompile limit (8); patched: one
    assert before["graphs"] >= 8 and after["graphs"] == 1, (before["graphs"], after["graphs"])
    # every step still trains, with the original's losses (the same operators, one graph)
    assert len(after["losses"]) == STEPS
    assert after["losses"] == pytest.approx(before["losses"], rel=1e-5)
