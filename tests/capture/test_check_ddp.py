"""The DDP example under torchrun with gloo: each rank writes its own results, rank 0 prints
the combined summary with per-rank step times."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.capture.check_helpers import EXAMPLES, FAST_STEPS, REPO


@pytest.mark.slow
def test_ddp_example_under_torchrun(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
        f"--master_port={port}", "-m", "torchdoctor", "check", "--warmup", "3", "--steps", "3",
        "--out", str(out), str(EXAMPLES / "ddp_train.py"),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180, env=env)
    clues = [ln for ln in proc.stderr.splitlines() if "USDT" not in ln and "W11" not in ln]
    assert proc.returncode == 0, "\n".join(clues[:60])
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    for rank in (0, 1):
        rec = json.loads((folder / "ranks" / f"rank{rank}.json").read_text())
        assert rec["rank"] == {"rank": rank, "local_rank": rank, "world_size": 2}
        # every rank stops on the same step: after the clean steps that follow the window
        assert rec["steps"]["count"] == FAST_STEPS and rec["config"]["ddp"]
        assert (folder / "traces" / f"rank{rank}.json.gz").stat().st_size > 0
    combined = json.loads((folder / "run.json").read_text())
    assert combined["ranks"] == {"0": "ranks/rank0.json", "1": "ranks/rank1.json"}
    report = json.loads((folder / "report.json").read_text())
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert all(r["median_step_ms"] > 0 for r in report["ranks"])
    # only rank 0 prints the summary, once, with both ranks' step times
    assert proc.stdout.count("torchdoctor check:") == 1
    assert (
        f"rank 0: {FAST_STEPS} steps" in proc.stdout
        and f"rank 1: {FAST_STEPS} steps" in proc.stdout
    )
    assert "data-parallel" not in {f["id"] for f in report["findings"]}  # it is DDP


@pytest.mark.slow
def test_ddp_gradient_accumulation_gets_no_sync(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
        f"--master_port={port}", "-m", "torchdoctor", "check", "--warmup", "3", "--steps", "3",
        "--out", str(out), str(EXAMPLES / "ddp_accumulation.py"),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    rec = json.loads((folder / "ranks" / "rank0.json").read_text())
    assert rec["config"]["measured_backward_calls"] == 4 * rec["config"]["measured_optimizer_steps"]
    report = json.loads((folder / "report.json").read_text())
    (f,) = [f for f in report["findings"] if f["id"] == "exposed-communication"]
    assert "model.no_sync()" in f["fix"] and "4 backward passes per optimizer step" in f["fix"]
    assert "bucket_cap_mb=25" not in f["fix"]
