"""kill -9 the tuner in the middle of a search, resume it, and lose or repeat no finished trial."""

from __future__ import annotations

import collections
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from tests.conftest import selected

TINY = str(Path(__file__).parent / "workloads" / "tiny.py")


def rows(db: Path) -> list[tuple[int, str, str]]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as con:
        try:
            return list(con.execute("SELECT seq, key, assignment FROM trials ORDER BY seq"))
        except sqlite3.OperationalError:  # the schema is not written yet
            return []


def cmd(tmp_path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torchdoctor.tune.cli",
        TINY,
        "--knobs",
        "num_workers,optimizer_impl",
        "--steps",
        "6",
        "--warmup",
        "2",
        "--fidelity-steps",
        "6",
        "--max-trials",
        "8",
        "--db",
        str(tmp_path / "t.sqlite"),
        "--out",
        str(tmp_path / "best.toml"),
        "--json",
        str(tmp_path / "r.json"),
        *extra,
    ]


def _wait_for_trials_gone(log: Path, limit_s: float = 30.0) -> None:
    """Until no process of this test's tuner is left: each has TD_TUNE_TEST_LOG=``log`` in its
    environment (a trial process that has not yet logged a line too)."""
    mark = f"TD_TUNE_TEST_LOG={log}".encode()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        left = []
        for proc in Path("/proc").iterdir():
            try:
                if not proc.name.isdigit() or mark not in (proc / "environ").read_bytes():
                    continue
                if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    left.append(proc.name)  # a zombie has ended
            except OSError:  # gone meanwhile, or not ours to read
                continue
        if not left:
            return
        time.sleep(0.1)


@pytest.mark.slow
def test_kill_9_then_resume(tmp_path: Path) -> None:
    db, log = tmp_path / "t.sqlite", tmp_path / "runs.log"
    env = {**os.environ, "TD_TUNE_TEST_LOG": str(log), "COLUMNS": "200"}
    err = (tmp_path / "first.err").open("w")
    proc = subprocess.Popen(cmd(tmp_path), env=env, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 120
    while len(rows(db)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = rows(db)
    err.close()
    assert len(before) >= 3, (tmp_path / "first.err").read_text()[-2000:]
    _wait_for_trials_gone(log)  # the trial in flight (its own session) finishes or dies on its own

    done = subprocess.run(
        cmd(tmp_path, "--resume"), env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    after = rows(db)
    assert [r[0] for r in after] == list(range(len(after)))  # no gap, no duplicate sequence number
    assert after[: len(before)] == before  # nothing finished was lost or rewritten
    assert len(before) < len(after) <= 8 and len({r[1] for r in after}) == len(after)
    assert done.stdout.count("(resumed)") == len(before)
    assert done.stdout.count("trial ") - len(before) == len(after) - len(before)

    # Each finished trial trained exactly once; at most one (in flight at the kill) ran twice.
    # A trial process builds its candidate first: the first line of each process id.
    first: dict[str, str] = {}
    for line in log.read_text().splitlines():
        pid, what = line.split(" ", 1)
        first.setdefault(pid, what)
    ran = collections.Counter(first.values())
    stored = collections.Counter(
        "{num_workers} {optimizer_impl} {grad_accumulation}".format(**json.loads(r[2]))
        for r in after
    )
    extra = ran - stored
    assert not (stored - ran) and sum(extra.values()) <= 1, (ran, stored)
    exported = json.loads((tmp_path / "r.json").read_text())
    assert (tmp_path / "best.toml").exists() and exported["trials"] == len(after)


CTRL_C_TEST = "test_ctrl_c_prints_the_resume_command_and_exits_130"


def _interrupt_after_two_trials(tmp_path: Path) -> tuple[int | None, str]:
    """A search stopped by SIGINT once two trials are stored: its exit status and stderr."""
    db = tmp_path / "t.sqlite"
    proc = subprocess.Popen(
        cmd(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while len(rows(db)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


@pytest.fixture(scope="module", autouse=True)
def interrupted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, Future[tuple[int | None, str]]] | None]:
    """The Ctrl-C test's search, started in a thread when this module's first test runs: it
    runs beside the kill -9 test's (one tuner each, its trials one at a time), and the Ctrl-C
    test reads how it ended."""
    if not selected(request.session, __name__, CTRL_C_TEST):
        yield None
        return
    tmp = tmp_path_factory.mktemp("ctrl-c")
    pool = ThreadPoolExecutor(max_workers=1)
    yield tmp, pool.submit(_interrupt_after_two_trials, tmp)
    pool.shutdown(wait=True)


@pytest.mark.slow
def test_ctrl_c_prints_the_resume_command_and_exits_130(
    interrupted: tuple[Path, Future[tuple[int | None, str]]] | None,
) -> None:
    assert interrupted is not None
    tmp_path, ended = interrupted
    code, err = ended.result(timeout=300)
    assert code == 130, err[-2000:]
    assert "Traceback" not in err
    hint = err.strip().splitlines()[-1]
    assert "interrupted after" in hint and hint.endswith("--resume")
    again = hint.split("continue with: torchdoctor ", 1)[1].split()
    assert again[0] == "tune" and again[again.index("--db") + 1] == str(tmp_path / "t.sqlite")
    assert again[again.index("--steps") + 1] == "6"  # the settings a resume must repeat
