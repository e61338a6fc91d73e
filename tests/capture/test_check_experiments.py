"""check's extra steps after the window, end to end: never a recompile charged to the script,
skipped with the reason when they cannot be clean, and never the report's end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.capture.check_helpers import FAST, REPO, CheckRun, check_inprocess
from tests.conftest import selected
from torchdoctor.capture import experiments

CASES = Path(__file__).parent / "cases"


def test_compiles_after_the_cut_are_ours_not_the_scripts() -> None:
    import torch

    from torchdoctor.capture.compile_watch import CompileWatch

    torch._dynamo.reset()
    watch = CompileWatch()
    watch.install()
    threads = torch.get_num_threads()
    try:
        f = torch.compile(lambda x: x * 2 + 1, backend="eager")
        x = torch.randn(4)
        f(x)
        import time

        watch.ours_from(time.time())
        torch.set_num_threads(threads + 1)  # a dynamo guard: the next call recompiles
        f(x)
        snap = watch.snapshot(None)
    finally:
        torch.set_num_threads(threads)
        watch.uninstall()
        torch._dynamo.reset()
    assert snap.compiles == 1 and snap.recompiles == 0 and snap.recompile_events == ()
    assert snap.ours["recompiles"] == 1 and snap.ours["compiles"] == 1
    assert any("num_threads" in r for r in snap.ours["reasons"])


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the thread toggle needs 2 cores")
def test_a_compiled_model_is_never_recompiled_by_the_thread_toggle(tmp_path: Path) -> None:
    r = check_inprocess(tmp_path / "out", CASES / "compiled_one_thread.py")
    assert r.code == 0, r.stderr
    run = r.run
    (t,) = [e for e in run["experiments"] if e["id"] == "few-intra-op-threads"]
    assert t["skipped"] is not None and "compiled" in t["skipped"] and t["changed_ms"] == []
    assert run["compile"]["recompiles"] == 0, run["compile"]["recompile_events"]
    assert not run["compile"].get("ours", {}).get("recompiles")
    assert "recompiles" not in [f["id"] for f in r.report["findings"]]
    assert "not measuring" in r.stderr and "dynamo's guards" in r.stderr


@pytest.mark.slow
def test_very_long_steps_skip_the_experiments_and_the_run_ends_with_its_report(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # 0.3 s steps against a 2 s limit stand for 75 s steps against the 20 s one
    monkeypatch.setattr(experiments, "MAX_BUDGET_S", 2.0)
    r = check_inprocess(tmp_path / "out", CASES / "anomaly_steps.py", "0.3")
    assert r.code == 0, r.stderr
    run = r.run
    (t,) = [e for e in run["experiments"] if e["id"] == "anomaly-detection"]
    assert t["skipped"] is not None and "steps of 0.3 s" in t["skipped"]
    assert "limit 2 s" in t["skipped"]
    assert run["steps"]["experiment_steps"] == 0
    assert run["exit"]["status"] == "stopped"
    assert r.report["findings"]  # the report is there
    assert "not measuring anomaly detection off" in r.stderr


EXTRA_STEPS = "measuring a few more steps with anomaly detection off"
KILL_TEST = "test_an_experiment_killed_from_outside_leaves_the_report_written_before_it"


@dataclass
class Started:
    """A ``check`` of anomaly_steps.py in its own process, its output in files."""

    tmp: Path
    proc: subprocess.Popen[str]

    def stderr(self) -> str:
        return (self.tmp / "stderr").read_text()

    def result(self) -> CheckRun:
        self.proc.wait(timeout=120)
        folders = [p for p in (self.tmp / "out").iterdir() if p.is_dir()]
        stdout = (self.tmp / "stdout").read_text()
        folder = folders[0] if len(folders) == 1 else None
        return CheckRun(self.proc.returncode, stdout, self.stderr(), folder)


@pytest.fixture(scope="module")
def ends(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], CheckRun]]:
    """``ends(after)``: the check of anomaly_steps.py ending its first extra step by ``after``
    (``hang``, ``kill``). The hang runs alone until its extra steps begin; then the SIGKILL
    case, if its test runs, starts while the hang waits out its timeout (most of that test's
    time), and its test reads it."""
    started: dict[str, Started] = {}

    def start(after: str, *opts: str) -> Started:
        tmp = tmp_path_factory.mktemp(after)
        cmd = [sys.executable, "-m", "torchdoctor", "check", *FAST, *opts]
        cmd += ["--out", str(tmp / "out"), str(CASES / "anomaly_steps.py"), "0.005", after]
        with open(tmp / "stdout", "w") as out, open(tmp / "stderr", "w") as err:
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=err,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                cwd=REPO,
            )
        started[after] = Started(tmp, proc)
        return started[after]

    def run(after: str) -> CheckRun:
        if after in started:
            return started[after].result()
        if after == "kill":
            return start("kill").result()
        # The check reaches its extra steps in ~7 s on a 2-core machine (the SIGKILL case); 20
        # s leaves room for a loaded one, and the hang itself waits out the rest.
        hang = start("hang", "--timeout", "20")
        deadline = time.monotonic() + 120
        while EXTRA_STEPS not in hang.stderr() and hang.proc.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if selected(request.session, __name__, KILL_TEST):
            start("kill")
        return hang.result()

    yield run
    for s in started.values():
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


@pytest.mark.slow
def test_a_timeout_during_the_experiments_still_reports(ends: Callable[[str], CheckRun]) -> None:
    r = ends("hang")
    assert r.code == 124, r.stderr
    # the timeout came inside the extra steps, not before them
    assert EXTRA_STEPS in r.stderr, r.stderr
    run = r.run
    assert run["exit"]["status"] == "timeout"
    assert run["steps"]["experiment_steps"] == 0  # the first extra step never ended
    (t,) = [e for e in run["experiments"] if e["id"] == "anomaly-detection"]
    assert t["ratio"] is None
    assert r.report["findings"] is not None
    assert (r.folder / "report.txt").is_file()  # type: ignore[operator]


@pytest.mark.slow
def test_an_experiment_killed_from_outside_leaves_the_report_written_before_it(
    ends: Callable[[str], CheckRun],
) -> None:
    r = ends("kill")
    assert r.code in (-9, 137), r.stderr  # check ends by the same signal (137 in a shell)
    run = r.run
    # the record written before the first extra step, not one rebuilt from the step log
    assert run.get("written_before_experiments") is True and not run.get("from_evidence")
    assert run["ops"] is not None and run["trace"]
    (t,) = [e for e in run["experiments"] if e["id"] == "anomaly-detection"]
    assert t["ratio"] is None and "not measured" in t["skipped"]
    assert (r.folder / "report.txt").is_file()  # type: ignore[operator]
    assert r.report["findings"]


# -- a busy machine ---------------------------------------------------------------------------
def test_the_thread_toggle_runs_after_the_modes() -> None:
    """With other processes on the cores, 2 threads ran steps 6-44x slower (mkldnn_off.py,
    onednn_flags_ctx.py at load 11-17): measured first, the thread toggle used up the time
    limit and oneDNN's toggle was cut short. It runs last now, whatever the list's order."""
    from torchdoctor.capture import toggles

    log: list[str] = []
    threads = toggles.more_threads(lambda n: log.append(f"threads {n}"), 1, 2)
    mode = experiments.Toggle(
        "backend-disabled", "on", lambda: log.append("mode on"), lambda: log.append("mode off")
    )
    ex = experiments.Experiments([threads, mode], budget_s=60.0)
    assert ex.begin()
    while ex.tick(0.001):
        pass
    assert log[0] == "mode on" and log.index("threads 2") > log.index("mode off")
    assert log[-1] == "threads 1"  # the script's own setting is back at the end
    by_id = {r.id: r for r in ex.results()}
    assert len(by_id["backend-disabled"].pair_ratios) == len(experiments.PATTERN) // 2
    assert [r.id for r in ex.results()] == ["few-intra-op-threads", "backend-disabled"]


def test_with_time_for_one_toggle_the_thread_toggle_is_the_one_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The time limit fits one toggle of two: the thread toggle, listed first by
    ``Accounting._toggles`` but run last, is the one without time, not determinism's. The
    host's core-wait reader reaches the extra steps (each step's ``core_ms``)."""
    from torchdoctor.capture import toggles
    from torchdoctor.capture.accounting import Accounting
    from torchdoctor.capture.options import CheckOptions

    log: list[str] = []
    threads = toggles.more_threads(lambda n: log.append(f"threads {n}"), 1, 2)
    mode = experiments.Toggle(
        "deterministic-algorithms", "off", lambda: log.append("on"), lambda: log.append("off")
    )
    acc = Accounting(CheckOptions(), False, lambda: False, lambda: False)
    monkeypatch.setattr(acc, "_toggles", lambda: [threads, mode])
    monkeypatch.setattr(
        experiments, "plan", lambda *_: experiments.Plan(budget_s=60.0, toggles=1, step_ms=1.0)
    )
    acc.experiment_host = experiments.Host(
        lambda: ([1.0] * 5, [0.0] * 5), lambda: 0.002, lambda: 0.007, lambda: None
    )
    assert acc.experiments_begin(full=False)
    assert threads.skipped is not None and "no time left" in threads.skipped
    assert mode.skipped is None
    ex = acc.experiments
    assert ex is not None
    while ex.tick(0.001):
        pass
    assert "threads 2" not in log and log[0] == "on"
    assert mode.changed_core_ms == [pytest.approx(7.0)] * (len(experiments.PATTERN) // 2)
    assert mode.changed_wait_ms == [pytest.approx(2.0)] * (len(experiments.PATTERN) // 2)


def test_a_machine_slower_than_in_the_window_keeps_its_pairs() -> None:
    """Every step of both arms 2.5x the window's median (the load rose after the window): the
    pairs stay; a step far beyond the toggle's own baseline steps is still rejected."""
    ref = experiments.Plan(budget_s=10.0, toggles=1, step_ms=40.0, wait_ms=0.0)
    t = experiments.Toggle("anomaly-detection", "off", lambda: None, lambda: None)
    for c, b in [(50.0, 100.0), (52.0, 104.0), (49.0, 98.0), (51.0, 1000.0)]:
        t.record("changed", c, 0.0)
        t.record("baseline", b, 0.0)
    r = t.result(ref)
    assert len(r.pair_ratios) == 3 and r.skipped is None
    assert r.ratio == pytest.approx(50.0 / 100.0)
    (why,) = r.rejected_pairs
    assert why.startswith("pair 4 ") and "9.8x a regular step (102.0 ms" in why


def test_each_pair_is_also_read_net_of_its_steps_wait_for_a_core() -> None:
    """A step that waited most of its time for a core measures the scheduler: pair 2's changed
    step ran 300 ms, 222 of them waiting (1.2 by the wall clock), 78 against 100 ms of its own
    (0.78). The step clock's reading of each step comes through host_for's readings."""
    t = experiments.Toggle("anomaly-detection", "off", lambda: None, lambda: None)
    for (c, cc), (b, bc) in [((100, 20), (130, 28)), ((300, 222), (250, 150)),
                             ((95, 18), (120, 20)), ((210, 131), (260, 160))]:  # fmt: skip
        t.record("changed", c, 0.0, cc)
        t.record("baseline", b, 0.0, bc)
    r = t.result(None)
    assert r.pair_ratios == (0.7692, 1.2, 0.7917, 0.8077)
    assert r.net_pair_ratios == (0.7843, 0.78, 0.77, 0.79)
    t.record("changed", 90.0, 0.0)  # a fifth pair without the reading: no net ratios at all
    t.record("baseline", 120.0, 0.0)
    assert t.result(None).net_pair_ratios == ()

    from types import SimpleNamespace

    # the step clock's per-step readings (s), the step that just ended last
    clock = SimpleNamespace(data_wait_s=[0.001, 0.002], core_wait_s=[0.010, 0.222])
    host = experiments.host_for(clock, lambda: None)
    log: list[str] = []
    ex = experiments.Experiments(
        [experiments.Toggle("x", "x", lambda: log.append("on"), lambda: log.append("off"))],
        budget_s=60.0,
        last_wait_s=host.last_wait_s,
        last_core_s=host.last_core_s,
    )
    assert ex.begin() and ex.tick(0.05)  # the warm step is not recorded
    ex.tick(0.3)  # the first changed step
    (t,) = ex.toggles
    assert t.changed_ms == [300.0] and t.changed_wait_ms == [2.0]
    assert t.changed_core_ms == [pytest.approx(222.0)]
    ex.abort()
