"""End to end on the CPU: check, patch, prove (interleaved fresh processes), write, run.

The scripts are ``examples/fix/``: a slow loader, autograd anomaly mode left on, a per-step
``.item()`` log line, and a well-tuned script whose patch must be empty. Each patch must apply,
run, keep the losses, and measure a gain whose interval clears 1.1x.
"""

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
EXAMPLES = REPO / "examples" / "fix"
FAST = ["--warmup", "3", "--steps", "3"]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [e.get("PYTHONPATH")])])
    e["OMP_NUM_THREADS"] = "1"  # the change is the subject, not the thread count
    return e


def td(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchdoctor", *args],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        timeout=900,
    )


def copy(tmp: Path, name: str) -> Path:
    shutil.copy(EXAMPLES / name, tmp / name)
    return tmp / name


def proven(doc: dict[str, Any], codemod: str) -> dict[str, Any]:
    c = next(c for c in doc["changes"] if c["codemod"] == codemod)
    assert c["status"] == "patched", c
    assert c["measured"]["low"] > 1.1, c["measured"]
    assert c["fidelity"]["ok"] and c["fidelity"]["steps"] > 0, c["fidelity"]
    return c


def runs(tmp: Path, script: Path) -> None:
    r = subprocess.run(
        [sys.executable, script.name, "--steps", "12"],
        cwd=tmp,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]


def check_here(tmp: Path, monkeypatch: pytest.MonkeyPatch, script: Path) -> Path:
    """``check`` of ``script`` in this process, as fix's own check runs it (one intra-op thread,
    in the script's folder): its run folder, for ``fix --from``."""
    import torch

    from tests.capture.check_helpers import check_inprocess

    monkeypatch.chdir(tmp)
    torch.set_num_threads(1)  # put back after the test by the suite's global-modes fixture
    r = check_inprocess(Path("runs"), script.name, opts=FAST)
    assert r.code == 0, r.stderr[-3000:]
    (folder,) = (tmp / "runs").iterdir()
    return folder


@pytest.mark.slow
def test_slow_loader_gets_workers_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The patch keeps the user's own arguments and runs. Its proof (interleaved rounds, an
    interval above 1.1x) is the README's `fix --prove` block on this same script, which the docs
    test reruns; proving it twice cost the suite ~50 s. The check runs in this process, as in
    the anomaly-mode test (fix running its own check is the well-tuned test's and the README
    block's); the patched run is a fresh process."""
    script = copy(tmp_path, "slow_loader.py")
    folder = check_here(tmp_path, monkeypatch, script)
    r = td(tmp_path, "fix", "--from", str(folder), "--write", "--json", "fix.json")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "fix.json").read_text())
    c = next(c for c in doc["changes"] if c["codemod"] == "dataloader-args")
    assert c["status"] == "patched" and c["finding"] == "dataloader-config", c
    assert (tmp_path / "slow_loader.py.orig").is_file()
    text = script.read_text()
    # the patch writes the workers the report's remedy prints: the items sleep (a file read),
    # so as many as the batch's cost needs beyond the CPUs, up to WAITING_WORKERS_MAX
    report = json.loads((folder / "report.json").read_text())
    (f,) = [f for f in report["findings"] if f["id"] == "dataloader-config"]
    workers = f["evidence"]["suggested_num_workers"]
    assert f"num_workers={workers}," in f["fix"].splitlines()[0]
    assert f["evidence"]["on_cpu_share"] < 0.5 and workers == 16
    assert "collate_fn=collate,  # labels as a LongTensor" in text
    assert f"num_workers={workers}," in text
    runs(tmp_path, script)


@pytest.mark.slow
def test_anomaly_mode_is_turned_off_proven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """check names anomaly mode itself (its site recorded), and fix turns it off there. The
    check runs in this process (one intra-op thread, in the script's folder, as the fix's own
    processes run); the proof and the patched run are fresh processes."""
    import torch

    script = copy(tmp_path, "anomaly_mode.py")
    anomaly = torch.is_anomaly_enabled()
    try:
        folder = check_here(tmp_path, monkeypatch, script)
    finally:  # the script turns it on for this process: not for the tests after this one
        torch.autograd.set_detect_anomaly(anomaly)
    report = json.loads((folder / "report.json").read_text())
    named = [f for f in report["findings"] if f["id"] == "anomaly-detection"]
    assert named, [f["id"] for f in report["findings"]]
    assert any("anomaly_mode.py" in str(s) for s in named[0]["evidence"].get("sites") or [])
    r = td(
        tmp_path,
        "fix",
        "--from",
        str(folder),
        "--only",
        "anomaly-detection",
        "--prove",
        "--rounds",
        "6",  # the fewest with an interval; every round's ratio is ~2x or more here
        "--prove-steps",
        "15",
        "--warmup",
        "3",
        "--write",
        "--json",
        "fix.json",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    proven(json.loads((tmp_path / "fix.json").read_text()), "anomaly-off")
    assert "torch.autograd.set_detect_anomaly(False)" in script.read_text()
    runs(tmp_path, script)


@pytest.mark.slow
def test_per_step_item_log_moves_to_every_n_steps_proven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check names the per-step log line, and fix moves it under ``if step % N == 0``. The check
    runs in this process, as in the anomaly-mode test; the proof and the patched run are fresh
    processes."""
    script = copy(tmp_path, "item_logging.py")
    folder = check_here(tmp_path, monkeypatch, script)
    r = td(
        tmp_path,
        "fix",
        "--from",
        str(folder),
        "--only",
        "host-syncs-in-step",
        "--prove",
        "--rounds",
        "8",
        "--prove-steps",
        "100",
        "--warmup",
        "3",
        "--write",
        "--json",
        "fix.json",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    c = proven(json.loads((tmp_path / "fix.json").read_text()), "sync-every-n")
    assert c["summary"].startswith("log line under `if step % ")
    runs(tmp_path, script)


@pytest.mark.slow
def test_well_tuned_script_gets_an_empty_patch(tmp_path: Path) -> None:
    script = copy(tmp_path, "well_tuned.py")
    r = td(tmp_path, "fix", *FAST, "--json", "fix.json", script.name)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == ""
    doc = json.loads((tmp_path / "fix.json").read_text())
    assert doc["patch"] == "" and [c for c in doc["changes"] if c["status"] == "patched"] == []
