"""``capture/thread_stack.py``: another thread's stack as (code, line) pairs, no frame kept."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from types import CodeType

import pytest

from torchdoctor.capture.monitor import thread_user_stack
from torchdoctor.capture.thread_stack import raw_stack

REPO = Path(__file__).resolve().parents[2]


def _inner(ready: threading.Event, go: threading.Event) -> None:
    ready.set()
    go.wait(10)


def _outer(ready: threading.Event, go: threading.Event) -> None:
    _inner(ready, go)


def test_a_waiting_thread_is_read_innermost_first_and_an_ended_one_is_none() -> None:
    ready, go = threading.Event(), threading.Event()
    t = threading.Thread(target=_outer, args=(ready, go))
    t.start()
    try:
        assert ready.wait(10)
        raw = raw_stack(t.ident)
        assert raw is not None
        assert all(isinstance(c, CodeType) and isinstance(line, int) for c, line in raw)
        names = [c.co_name for c, _ in raw]
        assert names.index("_inner") < names.index("_outer")  # innermost first
        # the monitor's view of the same thread names this file's functions with their lines
        lines = thread_user_stack(t.ident, depth=3)
        assert any(x.endswith("in _inner") and "test_thread_stack.py:" in x for x in lines)
    finally:
        go.set()
        t.join(10)
    assert raw_stack(t.ident) is None
    assert raw_stack(None) is None and thread_user_stack(None) == ()


CHURN = """
import sys, threading
from torchdoctor.capture.thread_stack import raw_stack

stop = False

def rec(n):
    if n:
        return rec(n - 1)
    g = (i for i in range(3))
    return sum(g)

def churn():
    while not stop:
        for d in range(40):
            rec(d)

t = threading.Thread(target=churn)
t.start()
sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
depths = []
for _ in range(20000):
    raw = raw_stack(t.ident)
    depths.append(len(raw))
stop = True
t.join()
print(min(depths), max(depths))
"""


@pytest.mark.slow
def test_sampling_a_thread_that_calls_and_returns_all_the_time_never_crashes() -> None:
    """20,000 reads of a thread deep in recursion and generators, switching threads as often
    as the interpreter allows: the process ends normally (a crash in a walk is a signal)."""
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHURN)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    lo, hi = map(int, r.stdout.split())
    assert hi > 20 and lo >= 1  # the walk saw the recursion, and always the thread's own frame
