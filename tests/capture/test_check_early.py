"""Say what happened, early: a run-time SyntaxError is a crash (not a parse error), a crash
before the first step gets no step advice, a loop without optimizer or DataLoader is counted
by its backward() calls, and a script with no recognisable step hears so within the notice
time; rare long steps, housekeeping calls and the profiler's memory budget are named."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.capture.check_helpers import EXAMPLES, FAST_STEPS, REPO, CheckRun, check_inprocess
from tests.conftest import selected
from torchdoctor.rules.run_rules import run_findings

BUDGET_TEST = "test_steps_of_many_small_ops_stay_within_the_memory_budget"


@pytest.fixture(scope="module", autouse=True)
def budget_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, subprocess.Popen[bytes]] | None]:
    """The memory-budget test's check (~20 s of one core, no timing in what it asserts),
    started when this module's first test runs, on the core the module's other tests (one
    process each) leave idle on a 2-core machine; that test, last in the module, waits for it."""
    if not selected(request.session, __name__, BUDGET_TEST):
        yield None
        return
    tmp = tmp_path_factory.mktemp("budget")
    cmd = [
        sys.executable,
        "-m",
        "torchdoctor",
        "check",
        "--warmup",
        "1",
        "--clean-steps",
        "0",  # six steps of a million operators: no room for a clean window
        "--steps",
        "3",
        "--profile-memory-budget",
        "512",
        "--out",
        str(tmp / "runs"),
        str(EXAMPLES / "million_ops.py"),
        "250000",  # operators a step
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with (tmp / "stdout.txt").open("w") as fo, (tmp / "stderr.txt").open("w") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, cwd=REPO, env=env)
    yield tmp, proc
    if proc.returncode is None:
        proc.kill()
        proc.wait()


def test_run_time_syntax_error_is_a_crash_not_a_parse_error(tmp_path: Path) -> None:
    r = check_inprocess(tmp_path, EXAMPLES / "literal_eval_crash.py")
    assert r.code == 1
    assert r.run["exit"]["phase"] == "run"
    note = r.report["measurement"]["note"]
    assert "does not parse" not in note and "crashed" in note and "before its first step" in note
    assert "torchdoctor.step()" not in r.stdout and r.report["findings"] == []


def test_a_real_parse_error_is_still_one(tmp_path: Path) -> None:
    prog = tmp_path / "broken.py"
    prog.write_text("import torch\nfor i in range(3)\n    pass\n")
    r = check_inprocess(tmp_path / "runs", prog)
    assert r.code == 1 and r.run["exit"]["phase"] == "parse"
    assert "does not parse" in r.report["measurement"]["note"]
    assert "SyntaxError" in r.stderr


def test_crash_before_the_first_step_gets_no_step_advice(tmp_path: Path) -> None:
    prog = tmp_path / "boom.py"
    prog.write_text("import torch\nraise RuntimeError('no data at /data/train')\n")
    r = check_inprocess(tmp_path / "runs", prog)
    assert r.code == 1 and "torchdoctor.step()" not in r.stdout
    assert r.report["measurement"]["failure"] == "crash"
    assert "crashed (RuntimeError: no data at /data/train) before its first step" in r.stdout


@pytest.mark.slow
def test_manual_sgd_is_counted_by_backward(tmp_path: Path) -> None:
    r = check_inprocess(tmp_path, EXAMPLES / "manual_sgd.py")
    assert r.code == 0, r.stderr
    steps = r.run["steps"]
    assert (
        steps["source"] == "backward"
        and steps["count"] == FAST_STEPS
        and steps["profiled_steps"] == 3
    )


def test_backward_never_restarts_a_loop_with_an_optimizer(
    shared_check: Callable[..., CheckRun],
) -> None:
    """With an optimizer the steps are its steps from the first one (no switch, no window
    thrown away), as before backward() was a signal. The run test_check_examples reads too."""
    r = shared_check(EXAMPLES / "item_per_step.py")
    assert r.code == 0, r.stderr
    assert r.run["steps"]["source"] == "optimizer" and not r.run["steps"]["signal_switches"]


@pytest.mark.slow
def test_no_step_is_said_within_the_notice_time(tmp_path: Path) -> None:
    prog = tmp_path / "nostep.py"
    prog.write_text(
        textwrap.dedent("""
        import time
        import torch
        x = torch.randn(64, 64)
        t0 = time.time()
        while time.time() - t0 < 2.0:
            x = torch.tanh(x @ x) / 8
    """)
    )
    from torchdoctor.api import check

    res = check(prog, out_dir=tmp_path / "runs", no_step_notice_s=0.5, echo=False)
    assert res.record["monitor"]["no_step_notice"] is True


def _long_step_record(step_ms: list[float], samples: dict[str, object]) -> dict[str, object]:
    return {
        "exit": {"status": "stopped"},
        "steps": {
            "source": "optimizer",
            "count": len(step_ms),
            "measured_steps": 5,
            "warmup_steps": 3,
            "step_ms": step_ms,
            "mean_step_ms": sum(step_ms[3:]) / len(step_ms[3:]),
        },
        "monitor": {"source": "optimizer", "long_step_samples": samples},
    }


def test_a_step_many_times_the_median_is_a_finding_with_its_line() -> None:
    times = [900.0, 55.0, 54.0, 56.0, 747.0, 55.0, 53.0, 57.0, 55.0]
    stack = [
        "/w/model.py:180 in forward",
        "/w/train.py:210 in estimate_loss",
        "/w/train.py:262 in <module>",
    ]
    rec = _long_step_record(times, {"5": [{"stack": stack, "samples": 12}]})
    (f,) = [f for f in run_findings(rec) if f.id == "rare-long-steps"]
    assert "step 5 took 747.0 ms against a 55.0 ms median (13.6x)" in f.title
    assert f.where and "train.py:262 in <module>" in f.where[0]
    assert f.saving_ms_per_step == pytest.approx((747 - 55) / 8)


def test_steady_steps_and_data_waits_are_not_long_steps() -> None:
    assert not [
        f
        for f in run_findings(_long_step_record([9, 10, 11, 10, 12, 10, 9, 11.0], {}))
        if f.id == "rare-long-steps"
    ]
    rec = _long_step_record([9, 10, 11, 10, 300, 10, 9, 11.0], {})
    rec["steps"]["data_wait_ms"] = [0, 0, 0, 0, 290, 0, 0, 0]  # type: ignore[index]
    assert not [f for f in run_findings(rec) if f.id == "rare-long-steps"]


def test_a_profiled_step_is_judged_against_the_profiled_steps() -> None:
    """Seen on examples/check/slow_dataloader.py: with the profiler on, compute (step less data
    wait) ran 2-17 ms a step against 2.3 ms unprofiled. Against the run's median (3.2 ms) the
    17 ms step was "5.3x"; against the steps profiled like it (5.4 ms) it is 3.1x: noise."""
    step_ms = [35.4, 28.9, 29.3, 36.4, 27.8, 32.2, 36.6, 30.2, 44.3, 28.8]
    waits = [0.0, 26.5, 27.0, 29.1, 26.1, 26.8, 27.4, 27.0, 27.3, 26.7]
    rec = _long_step_record(step_ms, {})
    rec["steps"].update(  # type: ignore[attr-defined]
        data_wait_ms=waits, window=[6, 10], own_steps=[4, 5], warmup_steps=5
    )
    assert not [f for f in run_findings(rec) if f.id == "rare-long-steps"]
    # an evaluation inside the window is still one: 5x the profiled steps and more
    step_ms[7] = 27.0 + 60.0
    (f,) = [f for f in run_findings(rec) if f.id == "rare-long-steps"]
    assert "step 8 took 60.0 ms" in f.title


def test_an_unprofiled_step_is_never_judged_by_a_lower_baseline_than_every_steps() -> None:
    """Two unprofiled steps are too few for a median of their own: they are judged by the
    run's, never by their own (2 ms here)."""
    step_ms = [100.0, 2.0, 30.0, 9.0, 9.0, 10.0, 9.0, 10.0]
    rec = _long_step_record(step_ms, {})
    rec["steps"].update(window=[4, 8], warmup_steps=3)  # type: ignore[attr-defined]
    # 30 ms is 15x its unprofiled neighbour but 3.2x the run's 9.5 ms median: not rare-long
    assert not [f for f in run_findings(rec) if f.id == "rare-long-steps"]
    step_ms[2] = 80.0  # 8x the run's median
    (f,) = [f for f in run_findings(rec) if f.id == "rare-long-steps"]
    assert "step 3 took 80.0 ms" in f.title


@pytest.mark.slow
def test_check_eval_inside_the_loop(tmp_path: Path) -> None:
    r = check_inprocess(
        tmp_path, EXAMPLES / "eval_in_loop.py", opts=["--warmup", "3", "--steps", "6"]
    )
    found = {f["id"]: f for f in r.report["findings"]}
    f = found["rare-long-steps"]
    assert any("eval_in_loop.py:20" in w for w in f["where"]), f  # the estimate_loss() line


@pytest.mark.slow
def test_check_names_torch_save_and_gc_collect(tmp_path: Path) -> None:
    # no clean window: the counts and the finding come from the 3 profiled steps, and each
    # step's gc.collect() walks this whole test process (5 steps instead of 19)
    opts = ["--warmup", "2", "--clean-steps", "0", "--steps", "3"]
    r = check_inprocess(tmp_path, EXAMPLES / "save_every_step.py", opts=opts)
    rows = {row["what"]: row for row in r.run["config"]["housekeeping"]}
    assert rows["gc.collect"]["calls"] == 3 and rows["torch.save"]["calls"] == 3
    titles = [f["title"] for f in r.report["findings"] if f["id"] == "housekeeping-in-step"]
    assert any(t.startswith("gc.collect() every step at ") for t in titles), titles
    assert not [f for f in r.report["findings"] if f["id"] in ("host-bound", "input-pipeline")]


def _deep(n: int) -> tuple[str, ...]:
    import sys as _sys

    from torchdoctor.capture.monitor import user_stack

    if n:
        return _deep(n - 1)
    return user_stack(_sys._getframe())


def test_a_deep_sample_keeps_the_loop_line() -> None:
    """Sampled ten calls deep, the stack keeps the two innermost user frames and the outermost
    (the loop's own line), so a long step is named where the script called into it."""
    stack = _deep(10)
    assert len(stack) == 3
    assert stack[0].endswith("in _deep") and stack[1].endswith("in _deep")
    # the outermost user frame: this test, where the recursion was called, not an 11th _deep
    assert stack[-1].endswith("in test_a_deep_sample_keeps_the_loop_line")


def test_long_steps_name_the_loop_line_and_the_innermost_one() -> None:
    times = [900.0, 55.0, 54.0, 56.0, 747.0, 55.0, 53.0, 57.0, 55.0]
    stack = [
        "/w/model.py:64 in forward",
        "/w/model.py:88 in forward",
        "/w/train.py:264 in <module>",
    ]
    rec = _long_step_record(times, {"5": [{"stack": stack, "samples": 12}]})
    (f,) = [f for f in run_findings(rec) if f.id == "rare-long-steps"]
    assert f.evidence["sampled_stacks"] == [
        "/w/train.py:264 in <module>",
        "/w/model.py:64 in forward",
    ]
    assert "train.py:264 in <module>" in f.where[0] and "model.py:64 in forward" in f.where[1]


def test_the_watcher_samples_a_long_compute_part_of_a_data_bound_step() -> None:
    """Steps of 30 ms, 27 ms of them waiting for a batch: the rule judges the 3 ms of compute,
    so the watcher must sample a step whose compute has run 20 ms (the step is not yet 5x 30 ms)."""
    from array import array
    from time import perf_counter
    from types import SimpleNamespace

    from torchdoctor.capture.monitor import Monitor

    clock = SimpleNamespace(
        steps=5,
        source="optimizer",
        step_s=array("d", [0.030] * 5),
        data_wait_s=array("d", [0.027] * 5),
        core_wait_s=array("d", [0.0] * 5),  # no wait for a core
        core_wait_so_far_s=lambda: 0.0,
        _pending_wait=0.027,  # this step's batch came after the usual wait
        _step_start=perf_counter() - 0.047,  # 27 ms waiting + 20 ms of compute so far
    )
    profiler = SimpleNamespace(rss_at_start=None, recording=False)
    mon = Monitor(SimpleNamespace(clock=clock, profiler=profiler))
    mon._tick()
    assert 6 in mon.samples and sum(mon.samples[6].values()) == 1
    clock._step_start = perf_counter() - 0.031  # 4 ms of compute: an ordinary step
    mon.samples.clear()
    mon._tick()
    assert mon.samples == {}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc")
def test_steps_of_many_small_ops_stay_within_the_memory_budget(
    budget_run: tuple[Path, subprocess.Popen[bytes]] | None,
) -> None:
    """Budget 512 MiB for the profiler. Before, the same run held every event of the window
    (about 8 kB per operator once torch assembles them: 6 GB for three steps of a quarter of a
    million operators, nearly four budgets' worth in each step; the example's default, a
    million a step, only took longer). The check started with the module (``budget_run``)."""
    assert budget_run is not None
    tmp_path, proc = budget_run
    killer = threading.Timer(900, proc.kill)
    killer.start()
    # wait4 gives this child's own peak; RUSAGE_CHILDREN is the peak of every child the
    # test process ever had, so a bigger earlier one would hide this one.
    _, status, usage = os.wait4(proc.pid, 0)
    killer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    peak_mib = usage.ru_maxrss / 1024
    stdout, stderr = (tmp_path / "stdout.txt").read_text(), (tmp_path / "stderr.txt").read_text()
    assert proc.returncode == 0, stderr[-3000:]
    assert 100 < peak_mib < 512 + 1024, peak_mib  # torch itself, the budget, the read
    assert "profiling stopped early" in stdout
    assert (next((tmp_path / "runs").iterdir()) / "report.json").is_file()
