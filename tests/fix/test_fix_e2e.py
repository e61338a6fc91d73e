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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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


PROOFS = {
    "anomaly_mode.py": (
        "test_anomaly_mode_is_turned_off_proven",
        # 6 rounds: the fewest with an interval; every round's ratio is ~2x or more here
        ["--only", "anomaly-detection", "--rounds", "6", "--prove-steps", "15"],
    ),
    "item_logging.py": (
        "test_per_step_item_log_moves_to_every_n_steps_proven",
        ["--only", "host-syncs-in-step", "--rounds", "8", "--prove-steps", "100"],
    ),
}
"""Each proven script: its test, and fix's options for its one codemod."""


@dataclass
class Proving:
    """A script checked in this process and its ``fix --prove --write`` running in its own."""

    tmp: Path
    script: Path
    folder: Path
    """The check's run folder (``fix --from``)."""
    proc: subprocess.Popen[str]

    def fix_json(self) -> dict[str, Any]:
        """The proof's ``--json``, once the process has ended well."""
        try:
            self.proc.wait(timeout=900)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        err = (self.tmp / "fix.err").read_text()
        assert self.proc.returncode == 0, err[-3000:]
        return json.loads((self.tmp / "fix.json").read_text())


@pytest.fixture(scope="module")
def proving(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[pytest.MonkeyPatch, str], Proving]]:
    """The proofs of this run's selected tests, started together when the first of them asks:
    each script is checked in this process, then its proof (interleaved rounds of fresh
    processes, one intra-op thread each) starts in the background, so the second check and both
    proofs overlap (one core each on a 2-core machine, where the suite otherwise waits on one
    process at a time: ~25 s of the two tests' ~75 s). Each proof decides on its own
    interleaved rounds, so a process beside it moves both arms alike."""
    selected = {
        getattr(item, "originalname", "")
        for item in request.session.items
        if getattr(item, "module", None) is request.module
    }
    started: dict[str, Proving] = {}

    def get(monkeypatch: pytest.MonkeyPatch, name: str) -> Proving:
        if not started:
            for n, (test, opts) in PROOFS.items():
                if test in selected or n == name:
                    started[n] = _start(tmp_path_factory.mktemp(n[:-3]), monkeypatch, n, opts)
        return started[name]

    yield get
    for p in started.values():
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()


def _start(tmp: Path, monkeypatch: pytest.MonkeyPatch, name: str, opts: list[str]) -> Proving:
    import torch

    script = copy(tmp, name)
    anomaly = torch.is_anomaly_enabled()
    try:
        folder = check_here(tmp, monkeypatch, script)
    finally:  # anomaly_mode.py turns it on for the process: not for the next script's check
        torch.autograd.set_detect_anomaly(anomaly)
    cmd = [sys.executable, "-m", "torchdoctor", "fix", "--from", str(folder), "--prove", *opts]
    cmd += ["--warmup", "3", "--write", "--json", "fix.json"]
    with open(tmp / "fix.out", "w") as out, open(tmp / "fix.err", "w") as err:
        proc = subprocess.Popen(cmd, cwd=tmp, env=env(), stdout=out, stderr=err, text=True)
    return Proving(tmp, script, folder, proc)


@pytest.mark.slow
def test_anomaly_mode_is_turned_off_proven(
    proving: Callable[[pytest.MonkeyPatch, str], Proving], monkeypatch: pytest.MonkeyPatch
) -> None:
    """check names anomaly mode itself (its site recorded), and fix turns it off there. The
    check runs in this process (one intra-op thread, in the script's folder, as the fix's own
    processes run); the proof and the patched run are fresh processes."""
    p = proving(monkeypatch, "anomaly_mode.py")
    report = json.loads((p.folder / "report.json").read_text())
    named = [f for f in report["findings"] if f["id"] == "anomaly-detection"]
    assert named, [f["id"] for f in report["findings"]]
    assert any("anomaly_mode.py" in str(s) for s in named[0]["evidence"].get("sites") or [])
    proven(p.fix_json(), "anomaly-off")
    assert "torch.autograd.set_detect_anomaly(False)" in p.script.read_text()
    runs(p.tmp, p.script)


@pytest.mark.slow
def test_slow_loader_gets_workers_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The patch keeps the user's own arguments and runs. Its proof (interleaved rounds, an
    interval above 1.1x) is the README's `fix --prove` block on this same script, which the docs
    test reruns; proving it twice cost the suite ~50 s. The check runs in this process, as in
    the anomaly-mode test (fix running its own check is the well-tuned test's and the README
    block's); the patched run is a fresh process. It runs while the item-log proof does (the
    workers it asserts are the cap, for items that mostly wait)."""
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
def test_per_step_item_log_moves_to_every_n_steps_proven(
    proving: Callable[[pytest.MonkeyPatch, str], Proving], monkeypatch: pytest.MonkeyPatch
) -> None:
    """check names the per-step log line, and fix moves it under ``if step % N == 0``. The check
    runs in this process, as in the anomaly-mode test; the proof and the patched run are fresh
    processes."""
    p = proving(monkeypatch, "item_logging.py")
    c = proven(p.fix_json(), "sync-every-n")
    assert c["summary"].startswith("log line under `if step % ")
    runs(p.tmp, p.script)


@pytest.mark.slow
def test_well_tuned_script_gets_an_empty_patch(tmp_path: Path) -> None:
    script = copy(tmp_path, "well_tuned.py")
    r = td(tmp_path, "fix", *FAST, "--json", "fix.json", script.name)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == ""
    doc = json.loads((tmp_path / "fix.json").read_text())
    assert doc["patch"] == "" and [c for c in doc["changes"] if c["status"] == "patched"] == []
