"""Which implementation host-bound's remedy and the ``fused-optimizer`` codemod name for a
for-loop Adam: on a CPU run ``fused=True`` only with one intra-op thread (torch's CPU fused step
splits every parameter across all intra-op threads; with two on a busy 2-core machine it was
slower than the loop on 48 Linear(8, 8), benchmarks/RESULTS.md), ``foreach=True`` otherwise; on a
GPU ``fused=True`` whatever the CPU threads. The printed line and the patch agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from torchdoctor.fix.context import FixContext
from torchdoctor.fix.model import FindingRef, Target
from torchdoctor.fix.registry import CODEMODS
from torchdoctor.record.run import RunRecord
from torchdoctor.rules.optimizer_fixes import for_loop_optimizers, optimizer_line
from torchdoctor.rules.run_rules import run_findings

SCRIPT = "import torch\nopt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)\n"
OPS = {
    "gemm_share_basis": "cpu",
    "top_level_ops_per_step": 1200,
    "median_op_us": 1.5,
    "op_time_ms_per_step": 4.0,
    "tiny_op_time_ms_per_step": 3.0,
    "tiny_op_threshold_us": 20.0,
}


def cpu_run(threads: int | None, tmp: Path) -> dict[str, Any]:
    """A CPU run of 20 ms steps full of tiny operators, stepping a for-loop Adam at line 2."""
    adam = {
        "class": "Adam",
        "impl": "for-loop",
        "impl_options": ["fused", "foreach"],
        "param_devices": ["cpu"],
        "call": {"site": f"{tmp / 'train.py'}:2", "func": "torch.optim.Adam", "args": []},
    }
    return {
        "steps": {"count": 15, "measured_steps": 10, "mean_step_ms": 20.0, "step_ms": [20.0] * 15},
        "config": {"optimizers": [adam]},
        "ops": OPS,
        "modes": {"intra_op_threads": threads},
    }


@pytest.mark.parametrize(
    ("threads", "impl"), [(1, "fused"), (2, "foreach"), (16, "foreach"), (None, "foreach")]
)
def test_cpu_run_names_fused_only_with_one_intra_op_thread(
    tmp_path: Path, threads: int | None, impl: str
) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    rec = cpu_run(threads, tmp_path)
    (f,) = [f for f in run_findings(rec) if f.id == "host-bound"]
    other = "foreach" if impl == "fused" else "fused"
    assert f"{impl}=True" in f.fix and f"{other}=True" not in f.fix
    # the codemod, planned from that finding, writes what the report printed
    ctx = FixContext(RunRecord.from_dict(rec), str(tmp_path), str(tmp_path / "train.py"))
    (target,) = CODEMODS["fused-optimizer"].plan(FindingRef.from_dict(f.to_dict()), ctx)
    assert isinstance(target, Target), target
    assert target.line == 2 and target.params == {"class": "Adam", "impl": impl}


def test_gpu_parameters_keep_fused_whatever_the_cpu_threads(tmp_path: Path) -> None:
    rec = cpu_run(8, tmp_path)
    rec["config"]["optimizers"][0]["param_devices"] = ["cuda:0"]
    rec["gpu"] = {"name": "NVIDIA H100"}
    (adam,) = for_loop_optimizers(RunRecord.from_dict(rec))
    assert "fused=True" in optimizer_line(adam)
    # the same optimizer on the CPU with those 8 threads is told foreach
    rec["config"]["optimizers"][0]["param_devices"] = ["cpu"]
    rec["gpu"] = None
    (adam,) = for_loop_optimizers(RunRecord.from_dict(rec))
    assert "foreach=True" in optimizer_line(adam) and "fused" not in optimizer_line(adam)
