"""host-bound on a compiled CPU step (``examples/check/compiled_tiny_ops.py``): the printed
optimizer line, pasted in place of the script's own call, runs and trains with the fused
implementation; the report on that state names what is left as info (``tests/capture/
test_check_rules.py``), never the same line again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.capture.test_check_rules import record
from torchdoctor.rules.run_rules import run_findings

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "check" / "compiled_tiny_ops.py"
LINE = 21  # opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)

HARNESS = """
import json, runpy, sys, torch
made, losses = [], []
init, backward = torch.optim.Adam.__init__, torch.Tensor.backward
def watch_init(self, *a, **k):
    init(self, *a, **k)
    made.append({"fused": self.defaults.get("fused"), "foreach": self.defaults.get("foreach")})
def watch_backward(self, *a, **k):
    losses.append(float(self))
    return backward(self, *a, **k)
torch.optim.Adam.__init__ = watch_init
torch.Tensor.backward = watch_backward
sys.argv = [sys.argv[1], "--backend", "eager", "--steps", "60"]
runpy.run_path(sys.argv[0], run_name="__main__")
print(json.dumps({"made": made, "losses": losses}))
"""


def _before_fix() -> str:
    """The host-bound fix check prints for the script as it is (a for-loop Adam built at
    LINE, the model compiled, a CPU run)."""
    ops = {
        "gemm_share_basis": "cpu",
        "top_level_ops_per_step": 1111,
        "median_op_us": 2.1,
        "op_time_ms_per_step": 4.0,
        "tiny_op_time_ms_per_step": 3.0,
        "tiny_op_threshold_us": 20.0,
    }
    call = {
        "site": f"{SCRIPT}:{LINE}",
        "func": "torch.optim.Adam",
        "args": ["model.parameters()"],
        "kwargs": {"lr": "1e-3", "foreach": "False"},
    }
    adam = {"class": "Adam", "impl": "for-loop", "impl_options": ["fused", "foreach"], "call": call}
    compiled = {"compiles": 1, "compile_s": 0.01, "compile_calls": [{}]}
    # one intra-op thread, as the harness runs it: fused (with more, a CPU run is told foreach)
    modes = {"intra_op_threads": 1}
    rec = record(ops=ops, compile=compiled, config={"optimizers": [adam]}, modes=modes)
    (f,) = [f for f in run_findings(rec) if f.id == "host-bound"]
    return f.fix


@pytest.mark.slow
def test_the_pasted_optimizer_line_runs_fused_and_trains(tmp_path: Path) -> None:
    fix = _before_fix()
    code = [ln for ln in fix.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(code) == 1 and "torch.compile(model" not in fix  # compiled already: one line
    statement = code[0].split("  #")[0].strip()
    assert f"compiled_tiny_ops.py:{LINE}" in code[0]  # it says where it goes
    lines = SCRIPT.read_text().splitlines()
    own = lines[LINE - 1]
    assert "torch.optim.Adam(" in own and "foreach=False" in own
    indent = own[: len(own) - len(own.lstrip())]
    lines[LINE - 1] = f"{indent}opt = {statement}"  # the user's own call, only what changes
    pasted = tmp_path / "compiled_tiny_ops.py"
    pasted.write_text("\n".join(lines) + "\n")
    (tmp_path / "harness.py").write_text(HARNESS)
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "harness.py"), str(pasted)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["made"] == [{"fused": True, "foreach": None}]  # no for-loop Adam left
    losses = out["losses"]
    assert len(losses) == 60 and losses[-1] < losses[0]
