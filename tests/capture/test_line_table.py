"""The per-line table from hand-built samples (every number worked out by hand), and the
sampler's view of which code is the user's."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

from torchdoctor.capture.line_table import OpIntervals, build_line_table
from torchdoctor.capture.sampler import (
    STATE_IO,
    STATE_RUNNING,
    STATE_SLEEP,
    STATE_UNKNOWN,
    Samples,
)
from torchdoctor.code_paths import USER, CodePaths

MS = 1_000_000  # ns


def samples(
    rows: list[tuple[int, int, int, int, int, tuple[tuple[str, int, str], ...]]],
) -> Samples:
    """(t_ms, cpu_ms, state, io_bytes, gc_flag, stack) per sample; the window starts at 0."""
    s = Samples(start_ns=0, interval_s=0.001)
    ids: dict[tuple[tuple[str, int, str], ...], int] = {}
    for t, cpu, state, io, flag, stack in rows:
        s.t_ns.append(t * MS)
        s.cpu_ns.append(cpu * MS)
        s.runq_ns.append(0)
        s.io_bytes.append(io)
        s.state.append(state)
        s.flags.append(flag)
        if stack not in ids:
            ids[stack] = len(s.stacks)
            s.stacks.append(stack)
        s.stack.append(ids[stack])
        s.leaf.append(0)
    s.leaves = ["user"]
    return s


LOOP = ("train.py", 10, "main")
SLEEP = (("train.py", 12, "main"),)
INNER = (("train.py", 30, "metric"), ("train.py", 14, "main"))


def test_self_inclusive_and_categories_by_hand() -> None:
    s = samples(
        [
            (10, 10, STATE_RUNNING, 0, 0, INNER),  # 10 ms Python in metric(), called at line 14
            (20, 20, STATE_RUNNING, 0, 0, INNER),  # 10 more
            (50, 20, STATE_SLEEP, 0, 0, SLEEP),  # 30 ms asleep at line 12
            (60, 21, STATE_UNKNOWN, 0, 0, (LOOP,)),  # 10 ms, 1 ms of CPU: waiting
            (80, 41, STATE_RUNNING, 0, 0, (LOOP,)),  # 20 ms inside an operator (below)
        ]
    )
    ops = OpIntervals([65 * MS], [85 * MS], ["aten::mm"])
    t = build_line_table(s, ops, steps=2, step_ms=None)
    assert t["sampled_ms"] == 80
    assert t["ms_per_step"] == 40
    rows = {r["site"]: r for r in t["rows"]}
    assert rows["train.py:30"]["self_ms"] == 10  # 20 ms over 2 steps
    assert rows["train.py:30"]["inclusive_ms"] == 10
    assert rows["train.py:14"]["self_ms"] == 0 and rows["train.py:14"]["inclusive_ms"] == 10
    assert rows["train.py:12"]["under"] == {"sleep/wait": 15}
    assert rows["train.py:10"]["under"] == {"torch ops": 10, "Python": 0.5, "sleep/wait": 4.5}
    assert rows["train.py:10"]["ops"] == [["aten::mm", 10]]
    assert t["categories"] == {
        "torch ops": 10,
        "Python": 10.5,
        "I/O": 0,
        "sleep/wait": 19.5,
        "gc": 0,
        "CPU contention": 0,
    }
    assert rows["train.py:30"]["function"] == "metric"
    assert rows["train.py:30"]["self_share"] == 0.25


def test_a_transfer_on_the_cpu_counts_as_io_and_gc_as_gc() -> None:
    write = (("train.py", 40, "main"),)
    s = samples(
        [
            (10, 10, STATE_RUNNING, 0, 0, write),  # a page-cache copy in progress: running
            (20, 20, STATE_RUNNING, 0, 0, write),
            (30, 30, STATE_RUNNING, 5_000_000, 0, write),  # ... and the bytes land here
            (40, 40, STATE_IO, 5_000_000, 0, write),  # inside write() itself
            (50, 50, STATE_RUNNING, 5_000_000, 1, (LOOP,)),  # a collection
        ]
    )
    t = build_line_table(s, None, steps=1, step_ms=50.0)
    rows = {r["site"]: r for r in t["rows"]}
    assert rows["train.py:40"]["under"] == {"I/O": 40}
    assert rows["train.py:10"]["under"] == {"gc": 10}


def test_run_queue_wait_is_cpu_contention() -> None:
    s = samples([(10, 10, STATE_RUNNING, 0, 0, (LOOP,)), (20, 14, STATE_RUNNING, 0, 0, (LOOP,))])
    s.runq_ns[:] = array("q", [0, 6 * MS])
    t = build_line_table(s, None, steps=1, step_ms=20.0)
    assert t["categories"]["CPU contention"] == 6
    assert t["categories"]["Python"] == 14


def test_a_wait_longer_than_its_interval_goes_back_to_the_intervals_before_it() -> None:
    """The kernel counts a 18 ms wait when it ends, inside a 10 ms interval: the 8 ms beyond
    it were the interval before (the thread was waiting up to the moment it ran), not lost."""
    s = samples([(10, 10, STATE_RUNNING, 0, 0, (LOOP,)), (20, 12, STATE_RUNNING, 0, 0, (LOOP,)),
                 (30, 12, STATE_RUNNING, 0, 0, (LOOP,))])  # fmt: skip
    s.runq_ns[:] = array("q", [0, 0, 18 * MS])
    t = build_line_table(s, None, steps=1, step_ms=30.0)
    assert t["categories"]["CPU contention"] == 18
    assert t["categories"]["Python"] == 12


def test_no_samples_no_rows() -> None:
    t = build_line_table(Samples(), None, steps=3, step_ms=10.0)
    assert t["rows"] == [] and t["samples"] == 0


def test_user_code_is_decided_by_real_folders_not_names(tmp_path: Path) -> None:
    import json

    import torch

    import torchdoctor

    paths = CodePaths()
    fake = tmp_path / "site-packages" / "torch" / "train.py"  # named like a library, is not one
    fake.parent.mkdir(parents=True)
    fake.write_text("")
    assert paths.label(str(fake)) == USER
    assert paths.label(torch.__file__) == "torch"
    assert paths.label(torchdoctor.__file__) == "torchdoctor"
    assert paths.label(json.__file__) == "stdlib:json"
    assert paths.label("<eval_with_key>.7") == "torch"
    assert paths.label("<stdin>") == USER
    link = tmp_path / "torch_link"
    link.symlink_to(Path(torch.__file__).parent)  # a library reached through a symlink
    assert paths.label(str(link / "nn" / "functional.py")) == "torch"


@pytest.mark.parametrize("pkg", ["click", "numpy"])
def test_installed_packages_are_libraries(pkg: str) -> None:
    mod = pytest.importorskip(pkg)
    assert CodePaths().label(mod.__file__).startswith("pkg:")
