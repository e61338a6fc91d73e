"""``check`` and the Lightning callback combined, with a user callback that churns hooks,
collects garbage and starts threads: training is unharmed, one of the two steps aside, and the
report is phrased in Lightning's settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning", reason="lightning not installed")

HERE = Path(__file__).parent
REPO = HERE.parents[1]
pytestmark = pytest.mark.slow


def test_check_with_the_callback_and_a_hook_churning_callback(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torchdoctor",
        "check",
        "--warmup",
        "3",
        "--steps",
        "3",
        "--out",
        str(tmp_path / "runs"),
        str(HERE / "lightning_guest.py"),
        str(tmp_path / "cb"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mutated during iteration" not in proc.stderr
    assert "DoctorCallback steps aside" in proc.stderr
    assert not (tmp_path / "cb").exists()  # one session, one run folder: check's
    (folder,) = (tmp_path / "runs").iterdir()
    run = json.loads((folder / "run.json").read_text())
    report = json.loads((folder / "report.json").read_text())
    assert run["exit"]["status"] == "stopped" and run["steps"]["source"] == "optimizer"
    assert run["framework"]["name"] == "lightning" and run["framework"]["strategy"]
    assert run["frameworks"] == []  # the callback is in use: no hint to add it
    ids = [f["id"] for f in report["findings"]]
    # the user's callback collects every batch: one finding for that one cause (gc-in-step,
    # or housekeeping-in-step when both fired at the line and were merged)
    gc_ids = ("gc-in-step", "housekeeping-in-step")
    assert any(i in ids for i in gc_ids), ids
    gc_finding = next(f for f in report["findings"] if f["id"] in gc_ids)
    assert any("lightning_guest.py" in w for w in gc_finding["where"])
