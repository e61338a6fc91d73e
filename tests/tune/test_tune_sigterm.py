"""SIGTERM to ``torchdoctor tune`` (``timeout``, a scheduler's stop) kills the running trial's
process group: a trial runs in its own session, so the signal never reaches it, and a trial left
behind keeps the GPU. tune exits 143 (128 + SIGTERM) with the resume hint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TINY = Path(__file__).parent / "workloads" / "tiny.py"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers signal 0: read its state.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


@pytest.mark.slow
def test_sigterm_kills_the_trial_process_group(tmp_path: Path) -> None:
    log = tmp_path / "built.log"
    env = {
        **os.environ,
        "TD_TUNE_TEST_MODE": "hang",  # the baseline trial sleeps an hour
        "TD_TUNE_TEST_LOG": str(log),
    }
    cmd = [sys.executable, "-m", "torchdoctor", "tune", str(TINY)]
    cmd += ["--db", str(tmp_path / "t.sqlite"), "--out", str(tmp_path / "t.toml")]
    tune = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and log.read_text().strip()) and time.monotonic() < deadline:
            assert tune.poll() is None, tune.communicate()
            time.sleep(0.2)
        trial_pid = int(log.read_text().split()[0])
        assert _alive(trial_pid)
        tune.send_signal(signal.SIGTERM)
        _, err = tune.communicate(timeout=60)
    finally:
        if tune.poll() is None:
            tune.kill()
    assert tune.returncode == 143, err.decode()
    assert b"terminated after 0 trials" in err and b"--resume" in err
    gone = time.monotonic() + 10
    while _alive(trial_pid) and time.monotonic() < gone:
        time.sleep(0.1)
    assert not _alive(trial_pid)
