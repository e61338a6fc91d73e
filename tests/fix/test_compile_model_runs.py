"""``compile-model`` applied to a real script and run: ``examples/check/tiny_ops.py`` runs a
model of 40 tiny layers (``tanh(x * scale + shift)``), hundreds of microsecond operators a step
(``host-bound``). The change is planned for that finding on the script (the codemod reads the
script, not the run: the model is the module whose ``.parameters()`` the optimizer takes), and
both versions run under a harness that profiles every step and records the losses: the per-layer
operators are gone (inductor fuses the 40 layers into one kernel; the original dispatches 40
``aten::tanh`` a step), the script still trains, with the original's losses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fix.patched import REPO, harnessed_both

STEPS = 6
needs_cxx = pytest.mark.skipif(
    not (shutil.which("g++") or shutil.which("c++")), reason="torch.compile needs a C++ compiler"
)

HARNESS = """
import json, runpy, sys

import torch

losses = []
prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
backward = torch.Tensor.backward
def recording(self, *a, **k):
    losses.append(float(self.detach()))
    out = backward(self, *a, **k)
    if len(losses) == 1:  # from the second step on: the first one compiles (and traces its ops)
        prof.start()
    return out
torch.Tensor.backward = recording
torch.manual_seed(0)  # the script draws its batch unseeded: the same batch in both runs
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
prof.stop()
tanh = sum(e.count for e in prof.key_averages() if e.key == "aten::tanh")
print("HARNESS " + json.dumps({"tanh": tanh, "losses": losses}))
"""


@pytest.mark.slow
@needs_cxx
def test_compile_model_patch_fuses_the_tiny_layers_and_trains_the_same(tmp_path: Path) -> None:
    from torchdoctor.fix import planner
    from torchdoctor.fix.context import FixContext
    from torchdoctor.fix.model import FindingRef
    from torchdoctor.record.run import RunRecord

    shutil.copy(REPO / "examples" / "check" / "tiny_ops.py", tmp_path / "tiny_ops.py")
    shutil.copy(tmp_path / "tiny_ops.py", tmp_path / "original.py")
    (tmp_path / "harness.py").write_text(HARNESS)
    path = tmp_path / "tiny_ops.py"
    host_bound = FindingRef("host-bound", saving_ms_per_step=30.0, evidence={"mean_step_ms": 40.0})
    ctx = FixContext(RunRecord.from_dict({}), str(tmp_path), str(path))
    plan = planner.plan([host_bound], ctx)
    (change,) = [c for c in plan.changes if c.codemod == "compile-model"]
    assert change.status == "patched", change.reason
    files, _ = planner.compose(plan, [change])
    path.write_text(files[str(path)])
    assert "    model.compile()" in path.read_text()

    steps = ("--steps", str(STEPS))
    (before, _), (after, _) = harnessed_both(
        tmp_path, "harness.py", "original.py", "tiny_ops.py", *steps
    )
    # the planted mistake: 40 tiny layers dispatched one by one, every step; compiled: fused
    # (steps after the first, which compiles)
    assert before["tanh"] == 40 * (STEPS - 1) and after["tanh"] == 0, (before, after)
    # it still trains, as the original did (the fused kernel computes the same layers, in
    # another order of float operations)
    assert len(after["losses"]) == STEPS and after["losses"][-1] < after["losses"][0]
    assert after["losses"] == pytest.approx(before["losses"], rel=1e-3)
