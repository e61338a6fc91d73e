"""The A/B engine's round loop and fresh process (``torchdoctor.ab.rounds``, ``ab.child``), which
``compare --rerun``, ``fix --prove`` and ``tune``'s trials run on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from torchdoctor.ab.child import Arm, run_child
from torchdoctor.ab.rounds import run_rounds

SRC = str(Path(__file__).resolve().parents[2] / "src")


# -- rounds -------------------------------------------------------------------------------------
def test_every_arm_runs_once_per_round_in_an_order_that_changes() -> None:
    calls: list[tuple[str, int]] = []
    played = run_rounds(["a", "b", "c"], lambda arm, rnd: calls.append((arm, rnd)) or 1.0, 6, 0)  # type: ignore[func-returns-value]
    rounds = [[a for a, r in calls if r == i] for i in range(6)]
    assert all(sorted(r) == ["a", "b", "c"] for r in rounds)
    assert played.orders == rounds and len({tuple(r) for r in rounds}) > 1
    assert rounds[1] == rounds[0][::-1]  # the odd round mirrors the one before
    assert played.stopped == "rounds" and played.of("b") == [1.0] * 6


def test_same_seed_same_orders_another_seed_others() -> None:
    def orders(seed: int) -> list[list[str]]:
        return run_rounds(["a", "b", "c"], lambda a, r: 0, 8, seed).orders

    assert orders(1) == orders(1) and orders(1) != orders(2)


def test_drop_takes_a_failed_arm_out_and_ends_when_one_is_left() -> None:
    calls: list[str] = []

    def run(arm: str, rnd: int) -> bool:
        calls.append(arm)
        return not (arm == "c" and rnd == 1)

    played = run_rounds(["a", "b", "c"], run, 5, 0, ok=bool, on_fail="drop")
    assert calls.count("c") == 2 and calls.count("a") == calls.count("b") == 5
    assert played.of("c") == [True, False] and played.stopped == "rounds"
    alone = run_rounds(["a", "b"], lambda a, r: a == "a", 5, 0, ok=bool, on_fail="drop")
    assert len(alone.runs) == 2 and alone.stopped == "arms"  # nothing left to compare


def test_stop_ends_at_the_failed_run_and_after_round_may_stop() -> None:
    played = run_rounds(["a", "b"], lambda a, r: r < 2, 6, 0, ok=bool)
    assert played.stopped == "failed" and len(played.runs) == 5  # its partner never ran
    seen: list[int] = []

    def after(rnd: int, this: list[tuple[str, int]]) -> str:
        seen.append(len(this))
        return "decided" if rnd == 3 else ""

    played = run_rounds(["a", "b"], lambda a, r: r, 9, 0, after_round=after)
    assert played.stopped == "decided" and seen == [2, 2, 2, 2]


# -- the fresh process --------------------------------------------------------------------------
def _arm(tmp: Path, body: str, **spec: Any) -> Arm:
    child = tmp / "child.py"
    child.write_text(
        "import json, os, sys, time\nfrom torchdoctor.ab.child import read_spec, write_result\n"
        "spec = read_spec(sys.argv)\n" + textwrap.dedent(body)
    )
    env = {"PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return Arm("x", (sys.executable, str(child)), spec, env, str(tmp))


def _gone(pid: int) -> bool:
    """The process has ended (a zombie not yet reaped counts), within 5 s of the kill."""
    for _ in range(100):
        try:
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (ProcessLookupError, FileNotFoundError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_a_result_comes_back_with_the_parents_clock(tmp_path: Path) -> None:
    got = run_child(
        _arm(tmp_path, "write_result(spec, {'n': spec['n'] * 2, 't': time.monotonic()})", n=21),
        30,
    )
    assert got.ending == "result" and got.result is not None and got.result["n"] == 42
    assert got.t_spawn < got.result["t"] < got.t_spawn + got.wall_s and got.why == ""


def test_no_result_a_signal_and_printed_lines(tmp_path: Path) -> None:
    quiet = run_child(_arm(tmp_path, "print('out'); sys.exit('boom one\\nboom two')"), 30)
    assert quiet.ending == "no-result" and quiet.returncode == 1
    assert quiet.why == "exited with status 1 without a result"
    assert quiet.tail() == "boom one | boom two" and "out" not in quiet.output
    loud = run_child(_arm(tmp_path, "print('out'); sys.exit(3)"), 30, stdout=True)
    assert loud.tail() == "out" and loud.returncode == 3
    killed = run_child(_arm(tmp_path, "import signal; os.kill(os.getpid(), signal.SIGSEGV)"), 30)
    assert killed.ending == "signal" and killed.why == "killed by SIGSEGV"
    bad = run_child(_arm(tmp_path, "open(spec['result_path'], 'w').write('{half')"), 30)
    assert bad.ending == "no-result" and bad.why.startswith("unreadable result")


SPAWNS = """
import subprocess
p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
open('grandchild.pid', 'w').write(str(p.pid))
time.sleep(120)
"""


@pytest.mark.slow
def test_a_hang_is_killed_with_its_whole_group_at_the_timeout(tmp_path: Path) -> None:
    t0 = time.monotonic()
    got = run_child(_arm(tmp_path, SPAWNS), 3)
    assert got.ending == "timeout" and got.why == "no result after 3 s"
    assert 2.5 < got.wall_s < 20 and time.monotonic() - t0 < 30
    assert _gone(int((tmp_path / "grandchild.pid").read_text()))


@pytest.mark.slow
def test_an_interrupt_kills_the_group_and_propagates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wait = subprocess.Popen.wait

    def interrupted(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        if timeout == 60:  # the run's own wait: Ctrl-C lands while the child runs
            pid = tmp_path / "grandchild.pid"
            while not (pid.exists() and pid.read_text()):
                time.sleep(0.05)
            raise KeyboardInterrupt
        return wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_child(_arm(tmp_path, SPAWNS), 60)
    assert _gone(int((tmp_path / "grandchild.pid").read_text()))
