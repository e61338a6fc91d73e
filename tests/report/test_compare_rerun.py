"""``compare --rerun``: the interleaving (order, early stop, failures) with fake processes, and the
real child on tiny scripts (``check``'s step clock, stopped after warm-up + steps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from torchdoctor.ab.child import ChildExit
from torchdoctor.capture import script_arm
from torchdoctor.compare import rerun_process
from torchdoctor.compare.cost import RunCost
from torchdoctor.compare.rerun import ChildRun, RerunOptions, Script, SideName, run_interleaved

TINY = """
import sys
import torch
torch.set_num_threads(1)
work = int(sys.argv[1]) if len(sys.argv) > 1 else 1
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
for step in range(10**6):  # never ends by itself: the clock stops it
    for _ in range(work):
        loss = model(x).square().mean()
        loss.backward()
    opt.step()
    opt.zero_grad()
"""


def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {"PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}


class _FakeRuns:
    """Stands in for the child processes: BASE costs 10 ms x load, NEW 8 ms x load, and the
    machine's load jumps from one process to the next."""

    def __init__(self, fail: tuple[str, int] | None = None, new_ms: float = 8.0) -> None:
        self.calls: list[tuple[SideName, int]] = []
        self.fail = fail
        self.new_ms = new_ms
        self.loads = iter(np.random.default_rng(3).uniform(1.0, 3.0, 1000))

    def __call__(self, side: SideName, rnd: int, script: Script, options: RerunOptions) -> ChildRun:
        self.calls.append((side, rnd))
        if self.fail == (side, rnd):
            return ChildRun(side, rnd, "error", 1, "failed (the script error, status 1)", 1.0, None)
        load = next(self.loads)
        # within one process the load holds: both sides of a round see nearly the same machine
        mean = (10.0 if side == "BASE" else self.new_ms) * (self._round_load(rnd) + 0.01 * load)
        cost = RunCost(np.full(5, mean), np.array([mean * 3]), startup_s=1.0, window_mean_ms=mean)
        return ChildRun(side, rnd, "stopped", 0, "", 2.0, cost)

    def _round_load(self, rnd: int) -> float:
        return [1.0, 2.5, 1.3, 3.0, 1.8, 1.1, 2.2, 2.9][rnd % 8]


def _scripts(tmp_path: Path) -> tuple[Script, Script]:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(TINY)
    b.write_text(TINY)
    return Script(str(a)), Script(str(b))


def test_interleaves_shuffled_and_stops_once_decided(tmp_path: Path) -> None:
    fake = _FakeRuns()
    seen: list[ChildRun] = []
    r = run_interleaved(
        *_scripts(tmp_path), RerunOptions(rounds=12), on_run=seen.append, runner=fake
    )
    assert r.stopped == "decided" and len(r.rounds) == 6  # the fewest with a 95% interval
    assert [c[1] for c in fake.calls] == [i // 2 for i in range(12)]  # one of each per round
    # a random order, reversed the next round: each side first in half of the rounds
    assert all(r.orders[i] != r.orders[i + 1] for i in range(0, len(r.orders) - 1, 2))
    assert r.orders.count("BASE NEW") == r.orders.count("NEW BASE") == 3
    assert [(c.side, c.round) for c in seen] == fake.calls
    assert r.ratios("mean_step") == pytest.approx([1.25] * 6, rel=0.02)
    assert r.verdict is not None and r.verdict.decided
    assert r.verdict.text.startswith("NEW is faster: mean step")
    assert r.speedup is not None and r.speedup.low > 1.2


def test_same_seed_same_order(tmp_path: Path) -> None:
    opts = RerunOptions(rounds=6, seed=5)
    first = run_interleaved(*_scripts(tmp_path), opts, runner=_FakeRuns()).orders
    assert run_interleaved(*_scripts(tmp_path), opts, runner=_FakeRuns()).orders == first


def test_a_failing_side_stops_the_rerun_and_is_named(tmp_path: Path) -> None:
    opts = RerunOptions(rounds=8)
    r = run_interleaved(*_scripts(tmp_path), opts, runner=_FakeRuns(fail=("NEW", 2)))
    assert r.stopped == "failed" and r.failure.startswith("NEW (")
    assert len(r.rounds) == 2 and r.verdict is not None and not r.verdict.decided
    first = run_interleaved(*_scripts(tmp_path), opts, runner=_FakeRuns(fail=("BASE", 0)))
    assert first.verdict is None and first.failure.startswith("BASE (")


@pytest.mark.slow
def test_real_child_runs_the_check_clock_and_stops(tmp_path: Path) -> None:
    """Two real processes: each stops after 2 warm-up + 3 steps, with its start-up measured."""
    a, b = _scripts(tmp_path)
    opts = RerunOptions(rounds=1, warmup=2, steps=3)
    r = run_interleaved(a, Script(b.path, ("2",)), opts, env=_env())
    assert r.failure == "", r.failure
    assert [c.status for c in r.runs] == ["stopped", "stopped"]
    for c in r.runs:
        assert c.cost is not None and len(c.cost.step_ms) == 3 and len(c.cost.warmup_ms) == 2
        assert 0.0 < c.cost.startup_s < c.wall_s  # the interpreter and torch's import
        assert 0.0 < c.cost.exit_s < c.wall_s - c.cost.startup_s  # its shutdown
        assert c.cost.one_time_s > c.cost.startup_s + c.cost.exit_s - 0.01
        assert c.cost.window_mean_ms is not None and c.cost.window_mean_ms > 0
        assert c.detail["source"] == "optimizer"
    assert r.verdict is not None and not r.verdict.decided  # one round decides nothing


@pytest.mark.slow
def test_real_child_failure_is_one_line_and_exit_2(tmp_path: Path) -> None:
    ok, bad = tmp_path / "ok.py", tmp_path / "bad.py"
    ok.write_text(TINY)
    bad.write_text("raise RuntimeError('boom at start')\n")
    cmd = [sys.executable, "-m", "torchdoctor", "compare", "--rerun", str(ok), str(bad)]
    done = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **_env()}, timeout=300
    )
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("torchdoctor: error: --rerun: NEW (") and "boom at start" in last


def test_rerun_cli_decides_and_gates_on_interleaved_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command line: NEW costs 8x BASE's step in every round, under load swings from one
    process to the next; six interleaved rounds decide that NEW is slower, and the gate fails
    on that (exit status 1). The fresh processes are a fake here (as in the tests above): the
    real child is ``test_real_child_*``, and docs/compare.md's ``--rerun`` block runs the
    command on two real scripts, 6 rounds of fresh processes, in the docs test (the same 12
    processes here cost the suite ~33 s)."""
    from click.testing import CliRunner

    from torchdoctor.cli import cli

    fake = _FakeRuns(new_ms=80.0)
    args: list[tuple[str, ...]] = []

    def child(side: SideName, rnd: int, script: Script, options: RerunOptions, **_: Any) -> Any:
        args.append(script.args)
        return fake(side, rnd, script, options)

    monkeypatch.setattr(rerun_process, "run_child", child)
    a, b = _scripts(tmp_path)
    done = CliRunner().invoke(
        cli,
        [
            "compare", "--rerun", "--rounds", "6", "--warmup", "2", "--steps", "15",
            "--fail-if-slower", "5", "--json", a.path, b.path, "--", "1",
        ],
    )  # fmt: skip
    assert done.exit_code == 1, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["evidence"] == "interleaved" and len(doc["orders"]) == 6
    assert doc["decided"] and doc["direction"] == "slower" and doc["gate"]["failed"]
    assert doc["costs"]["mean_step"]["interval"][1] < 1.0
    assert len(doc["per_round_speedups"]["mean_step"]) == 6
    assert doc["base"]["args"] == ["1"] and doc["new"]["args"] == ["1"]
    assert args == [("1",)] * 12 and len(fake.calls) == 12  # the script's words reach each run
    assert done.stderr.count("round ") == 12  # a progress line per process


def test_rerun_report_text_json_and_page(tmp_path: Path) -> None:
    from torchdoctor.compare import rerun_render
    from torchdoctor.json_arg import json_safe

    opts = RerunOptions(rounds=8, job_steps=1000)
    r = run_interleaved(*_scripts(tmp_path), opts, runner=_FakeRuns())
    text = rerun_render.render_text(r, 5.0)
    assert r.verdict is not None and r.verdict.text in text
    assert r.verdict.headline.quantity == "time_to_n" and "time to 1000 steps (s)" in text
    assert "per-round speed-ups (time to N steps)" in text
    # every fake run starts in 1.0 s and none compiles: the median start-up each side, no compile
    assert f"  {'of which start-up (s)':<26} {'1.0':>11} {'1.0':>11}\n" in text
    assert "of which compile" not in text
    assert "gate --fail-if-slower 5%: passed" in text  # NEW is the faster side
    doc = json.loads(json.dumps(json_safe(rerun_render.to_dict(r, 5.0))))
    assert doc["mode"] == "rerun" and len(doc["runs"]) == 2 * len(doc["orders"])
    assert doc["per_round_speedups"]["time_to_n"] == pytest.approx(r.ratios("time_to_n"))
    page = rerun_render.page(r, 5.0)
    assert [t.id for t in page.tables] == ["costs", "runs"] and not page.show_findings


def _read(doc: dict[str, Any], wall_s: float) -> script_arm.ArmResult:
    """A child's result document as the parent reads it: started at 100 s, ran ``wall_s``."""
    return script_arm.read(ChildExit("result", 0, doc, "", 100.0, wall_s))


def test_one_time_counts_what_ran_before_the_first_step() -> None:
    """The clock's first step may start at the first batch (an optimizer step took over as
    the signal): the script's set-up before it still counts, from the end of the warm-up."""
    doc = {
        "status": "stopped", "code": 0, "step_ms": [400.0, 300.0, 200.0, 10.0, 10.0, 10.0],
        "t_begin": 101.0, "t_measure": 105.0, "t_window_end": 105.03, "t_end": 105.1,
        "loaders": [{"batch_size": 64}], "warmup": 3,
    }  # fmt: skip
    cost, why = rerun_process.cost_of(_read(doc, 7.1), 3)
    assert cost is not None and why == ""
    assert cost.startup_s == pytest.approx(5.0 - 0.9)  # spawn to warm-up end, minus warm-up
    assert cost.exit_s == pytest.approx(2.0)
    assert cost.window_mean_ms == pytest.approx(10.0)
    # one-time: start-up + exit + warm-up beyond three steady steps
    assert cost.one_time_s == pytest.approx(4.1 + 2.0 + 0.9 - 0.03)
    assert cost.time_to_s(1000) == pytest.approx(cost.one_time_s + 10.0)
    assert cost.samples_per_step == 64.0
    short, why = rerun_process.cost_of(_read({**doc, "step_ms": [400.0]}, 7.1), 3)
    assert short is None and "fewer than --warmup 3 + 1" in why


def test_a_gpu_childs_steady_steps_are_its_cuda_event_times() -> None:
    # On a GPU the child times its measured steps as check's clean window does: the host's
    # step times (which absorb a sync's wait in whichever step hits it) give way to the GPU's
    doc = {
        "status": "stopped", "code": 0, "step_ms": [400.0, 300.0, 200.0, 2.0, 25.0, 3.0],
        "t_begin": 101.0, "t_measure": 105.0, "t_window_end": 105.03, "t_end": 105.1,
        "timed": {"clock": "cuda-events", "step_ms": [10.0, 10.5, 9.5], "first_step": 4},
        "warmup": 3,
    }  # fmt: skip
    cost, _ = rerun_process.cost_of(_read(doc, 7.1), 3)
    assert cost is not None and list(cost.step_ms) == pytest.approx([10.0, 10.5, 9.5])
    host = {**doc, "timed": {**doc["timed"], "clock": "host"}}
    cost, _ = rerun_process.cost_of(_read(host, 7.1), 3)
    assert cost is not None and list(cost.step_ms) == pytest.approx([2.0, 25.0, 3.0])


def test_a_full_run_counts_every_step_after_the_warm_up_and_its_whole_time() -> None:
    # --full: the script ended by itself after 7 steps; the clock's timed window (3 steps on
    # the GPU's clock) covers only part of them, so the host's steps stand, and no window mean
    doc = {
        "status": "completed", "code": 0, "warmup": 2, "compile_s": 1.5,
        "step_ms": [400.0, 300.0, 10.0, 12.0, 11.0, 30.0, 10.0],
        "t_begin": 101.0, "t_measure": 102.0, "t_window_end": 102.03, "t_end": 102.2,
        "timed": {"clock": "cuda-events", "step_ms": [9.0, 9.0, 9.0]},
    }  # fmt: skip
    cost, why = rerun_process.cost_of(_read(doc, 3.0), 3)
    assert cost is not None and why == ""
    assert list(cost.step_ms) == [10.0, 12.0, 11.0, 30.0, 10.0] and cost.window_mean_ms is None
    assert cost.job_steps == 7 and cost.job_s == 3.0 and cost.compile_s == 1.5
    assert cost.startup_s == pytest.approx(2.0 - 0.7) and cost.exit_s == pytest.approx(0.8)
