"""Threads beyond the free cores: measured from the kernel's per-thread counters during the
measured steps and an interleaved A/B after them, never read as a healthy step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.capture.check_helpers import EXAMPLES, FAST, REPO, CheckRun, _folder
from torchdoctor.rules.cpu_rules import cpu_demand
from torchdoctor.rules.run_rules import run_findings

linux_only = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")


def _cpu(**over: object) -> dict[str, object]:
    cpu: dict[str, object] = {
        "wall_s": 1.0,
        "process_cpu_s": 0.3,
        "cores": 2,
        "intra_op_threads": 2,
        "workers_cpu_s": None,
        "other_busy_cores": 1.6,
        "main_thread_runqueue_wait_s": 0.6,
    }
    return {**cpu, **over}


def _record(cpu: dict[str, object]) -> dict[str, object]:
    return {
        "exit": {"status": "stopped"},
        "steps": {"count": 6, "measured_steps": 3, "mean_step_ms": 100.0, "step_ms": [100.0] * 6},
        "ops": {"op_time_ms_per_step": 90.0},
        "cpu": cpu,
    }


def test_demand_counts_threads_and_busy_workers_against_free_cores() -> None:
    d = cpu_demand(_cpu(workers_cpu_s=0.9, other_busy_cores=0.2))
    assert d is not None
    assert d.free_cores == pytest.approx(1.8)
    assert d.demand == pytest.approx(2.9)
    assert d.oversubscribed and d.suggested_threads == 1
    assert not cpu_demand(_cpu(intra_op_threads=1)).oversubscribed  # type: ignore[union-attr]


def test_measured_slowdown_is_the_saving_and_the_fix_names_the_threads() -> None:
    probe = {"threads_a": 2, "threads_b": 1, "rounds": 9, "ratio_median": 4.0}
    (f,) = [
        f for f in run_findings(_record(_cpu(thread_probe=probe))) if f.id == "cpu-oversubscribed"
    ]
    assert f.saving_ms_per_step == pytest.approx(90.0 * 0.75)
    assert "4.0x slower than with 1 thread" in f.title
    assert f.fix.startswith("torch.set_num_threads(1)")
    assert "OMP_NUM_THREADS=1" in f.fix


def test_no_slowdown_measured_no_oversubscription_finding() -> None:
    probe = {"threads_a": 2, "threads_b": 1, "rounds": 9, "ratio_median": 1.05}
    found = run_findings(_record(_cpu(thread_probe=probe, main_thread_runqueue_wait_s=0.0)))
    assert not [f for f in found if f.id == "cpu-oversubscribed"]


def test_a_machine_busy_with_others_is_said_but_claims_no_saving() -> None:
    """Only when nothing else was found: the numbers are those of a busy machine."""
    (f,) = [
        f for f in run_findings(_record(_cpu(intra_op_threads=1))) if f.id == "cpu-oversubscribed"
    ]
    assert f.severity == "info" and f.saving_ms_per_step == 0
    assert "waited for a CPU core 60%" in f.title and "1.6 of 2 cores" in f.title


@linux_only
def test_window_record_reads_this_process_threads() -> None:
    from torchdoctor.capture import cpu_usage

    a = cpu_usage.sample()
    sum(i * i for i in range(300_000))  # some CPU on this thread
    rec = cpu_usage.window_record(a, cpu_usage.sample(), cpu_usage.main_thread_id(), 1, 1)
    assert rec["main_thread_run_s"] > 0
    assert rec["threads_run_s"] >= rec["main_thread_run_s"]
    assert 0 <= rec["other_busy_cores"] <= rec["cores"]


@linux_only
@pytest.mark.slow
def test_check_four_threads_on_one_core(tmp_path: Path) -> None:
    core = min(os.sched_getaffinity(0))
    cmd = [
        sys.executable,
        "-m",
        "torchdoctor",
        "check",
        *FAST,
        "--out",
        str(tmp_path),
        str(EXAMPLES / "threads_beyond_cores.py"),
    ]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
    )
    r = CheckRun(proc.returncode, proc.stdout, proc.stderr, _folder(tmp_path))
    assert r.code == 0, r.stderr
    cpu = r.run["cpu"]
    assert cpu["cores"] == 1 and cpu["intra_op_threads"] == 4
    assert cpu["thread_probe"]["ratio_median"] > 1.0
    # every step's wait of the intra-op threads beyond the step's own, as the step clock read it
    waits, steps = cpu["step_threads_wait_ms"], r.run["steps"]
    assert len(waits) == len(steps["step_ms"])
    measured = waits[steps["warmup_steps"] : steps["warmup_steps"] + steps["measured_steps"]]
    assert measured and all(isinstance(w, float) and w >= 0.0 for w in measured), waits
    found = {f["id"]: f for f in r.report["findings"]}
    f = found["cpu-oversubscribed"]
    assert f["fix"].startswith("torch.set_num_threads(1)  # in place of the line at "), f
    assert f["severity"] != "info"
    # pasted where it points (the script's own set_num_threads(4): a line placed above it was
    # undone by it), the script trains on one thread: the mistake is gone
    sys.path.insert(0, str(REPO / "benchmarks"))
    from validate_remedies import _paste_all

    copy = tmp_path / "threads_beyond_cores.py"
    copy.write_text((EXAMPLES / copy.name).read_text())
    pasted = _paste_all(f["fix"], f["where"], tmp_path, copy)
    assert not isinstance(pasted, str) and pasted[0] == "replace", pasted
    copy.write_text(pasted[2])
    probe = (
        "import runpy, sys, torch\n"
        "steps = []\n"
        "step = torch.optim.SGD.step\n"
        "def counted(self, *a, **k):\n"
        "    steps.append(torch.get_num_threads())\n"
        "    return step(self, *a, **k)\n"
        "torch.optim.SGD.step = counted\n"
        "g = runpy.run_path(sys.argv[1], run_name='__main__')\n"
        "print(len(steps), set(steps), float(g['loss']))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(copy)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
    )
    assert out.returncode == 0, out.stderr
    n, threads, loss = out.stdout.split(maxsplit=2)
    assert (n, threads) == ("30", "{1}") and 0 < float(loss) < 3.0, out.stdout


def test_the_busy_machine_caveat_stays_out_of_the_way_of_real_findings() -> None:
    rec = _record(_cpu(intra_op_threads=1))
    rec["steps"]["mean_data_wait_ms"] = 30.0  # type: ignore[index]
    rec["config"] = {"dataloaders": [{"num_workers": 0, "batch_size": 8}]}
    assert [f.id for f in run_findings(rec)] == ["dataloader-config"]
