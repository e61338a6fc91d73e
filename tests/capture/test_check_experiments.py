"""check's extra steps after the window, end to end: never a recompile charged to the script,
skipped with the reason when they cannot be clean, and never the report's end."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.capture.check_helpers import FAST, check_inprocess, check_subprocess
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
    assert snap["compiles"] == 1 and snap["recompiles"] == 0 and snap["recompile_events"] == []
    assert snap["ours"]["recompiles"] == 1 and snap["ours"]["compiles"] == 1
    assert any("num_threads" in r for r in snap["ours"]["reasons"])


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


@pytest.mark.slow
def test_a_timeout_during_the_experiments_still_reports(tmp_path: Path) -> None:
    r = check_subprocess(
        tmp_path / "out",
        CASES / "anomaly_steps.py",
        "0.005",
        "hang",
        # The check reaches its extra steps in ~7 s on this 2-core machine (the SIGKILL case
        # below); 20 s leaves room for a loaded one, and the hang itself waits out the rest.
        opts=[*FAST, "--timeout", "20"],
        timeout=120,
    )
    assert r.code == 124, r.stderr
    # the timeout came inside the extra steps, not before them
    assert "measuring a few more steps with anomaly detection off" in r.stderr, r.stderr
    run = r.run
    assert run["exit"]["status"] == "timeout"
    assert run["steps"]["experiment_steps"] == 0  # the first extra step never ended
    (t,) = [e for e in run["experiments"] if e["id"] == "anomaly-detection"]
    assert t["ratio"] is None
    assert r.report["findings"] is not None
    assert (r.folder / "report.txt").is_file()  # type: ignore[operator]


@pytest.mark.slow
def test_an_experiment_killed_from_outside_leaves_the_report_written_before_it(
    tmp_path: Path,
) -> None:
    r = check_subprocess(tmp_path / "out", CASES / "anomaly_steps.py", "0.005", "kill")
    assert r.code in (-9, 137), r.stderr  # check ends by the same signal (137 in a shell)
    run = r.run
    # the record written before the first extra step, not one rebuilt from the step log
    assert run.get("written_before_experiments") is True and not run.get("from_evidence")
    assert run["ops"] is not None and run["trace"]
    (t,) = [e for e in run["experiments"] if e["id"] == "anomaly-detection"]
    assert t["ratio"] is None and "not measured" in t["skipped"]
    assert (r.folder / "report.txt").is_file()  # type: ignore[operator]
    assert r.report["findings"]
