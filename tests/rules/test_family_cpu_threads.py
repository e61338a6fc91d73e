"""The CPU threads family (``rules/families/cpu_threads.py``): more intra-op threads than free
cores, measured by the thread probe; the main thread starved of cores on a busy machine (info,
saving 0); quiet when the probe saw no slow-down or failed, from hand-written check records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.rules.run_records import fire, record
from torchdoctor.rules.families import cpu_threads

(RULE,) = cpu_threads.RULES


def _cpu(ratio: float, wait_s: float | None = None, other: float = 0.0) -> dict[str, Any]:
    """Eight intra-op threads on four cores over one second; the probe ran the same work
    ``ratio`` times slower with 8 threads than with 4."""
    cpu: dict[str, Any] = {
        "wall_s": 1.0,
        "intra_op_threads": 8,
        "cores": 4,
        "other_busy_cores": other,
        "thread_probe": {"ratio_median": ratio, "threads_a": 8, "threads_b": 4},
    }
    if wait_s is not None:
        cpu["main_thread_runqueue_wait_s"] = wait_s
    return cpu


def test_threads_beyond_the_free_cores_slow_every_operator() -> None:
    f = fire(RULE, record(cpu=_cpu(2.0)))
    assert f is not None and f.id == "cpu-oversubscribed"
    assert f.title == (
        "8 intra-op threads on 4.0 free of 4 cores: the same work ran 2.0x slower than with "
        "4 thread(s)"
    )
    # the CPU run's operators take the whole 100 ms step: half of it at a 2x slow-down
    assert f.saving_ms_per_step == 50.0 and f.severity == "critical"
    assert f.fix.startswith("torch.set_num_threads(4)")
    assert f.evidence["runnable_threads"] == 8


def test_a_probe_whose_rounds_disagree_is_said_for_the_record() -> None:
    """control_batched_scoring at load 17: the probe's median was 2.46x but its rounds ran from
    0.76x to 791x (a round faster with the script's threads): a critical on the median alone
    was the load's, not the script's. The finding stays, as info; every round slower keeps it."""
    split = _cpu(2.46)
    split["thread_probe"] |= {"ratio_low": 0.76, "ratio_high": 791.0}
    f = fire(RULE, record(cpu=split))
    assert f is not None and f.severity == "info" and f.evidence["rounds_disagree"] is True
    split["thread_probe"]["ratio_low"] = 1.3
    g = fire(RULE, record(cpu=split))
    assert g is not None and g.severity == "critical" and g.evidence["rounds_disagree"] is False


def test_a_probe_without_a_slow_down_or_a_failed_probe_is_quiet() -> None:
    assert fire(RULE, record(cpu=_cpu(1.1))) is None  # under OVERSUBSCRIBED_RATIO's 1.2
    failed = _cpu(2.0)
    failed["thread_probe"]["failed"] = "timed out"
    assert fire(RULE, record(cpu=failed)) is None
    assert fire(RULE, record(cpu=_cpu(100.0))) is None  # above 4x per thread: not taken


def test_a_starved_main_thread_is_said_with_no_saving() -> None:
    f = fire(RULE, record(cpu=_cpu(1.0, wait_s=0.5, other=3.0)))
    assert f is not None and f.severity == "info" and f.saving_ms_per_step == 0.0
    assert f.title.startswith("the main thread waited for a CPU core 50% of the measured time")
    assert "nothing in the script causes this" in f.fix
    assert "run queue" in f.explanation
    assert fire(RULE, record(cpu=_cpu(1.0, wait_s=0.1, other=3.0))) is None  # 10% < 30%


def test_the_fix_replaces_the_scripts_own_set_num_threads() -> None:
    """threads_beyond_cores.py calls set_num_threads(4) after its imports: a line at the top of
    the script ran before it and was undone. The fix takes the place of the call that set the
    count the steps ran with, not of one that set another (a worker's own count)."""
    modes = {
        "setter_calls": [
            {"call": "set_num_threads", "value": 1, "site": "t.py:30"},
            {"call": "set_num_threads", "value": 8, "site": "t.py:6"},
        ]
    }
    f = fire(RULE, record(cpu=_cpu(2.0), modes=modes))
    assert f is not None
    assert f.fix == (
        "torch.set_num_threads(4)  # in place of the line at t.py:6: 8 threads share 4.0 free cores"
    )


def test_the_fix_rewrites_the_environment_the_script_sets(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text(
        'import os\n\nos.environ.setdefault("MKL_NUM_THREADS", "8")\n'
        'os.environ["OMP_NUM_THREADS"] = "8"\nimport torch\n'
    )
    rec = record(cpu=_cpu(2.0), modes={"thread_env": {"OMP_NUM_THREADS": "8"}})
    f = fire(RULE, {**rec, "script": str(script)})
    assert f is not None
    lines = f.fix.splitlines()
    assert lines[0].startswith("os.environ.setdefault('MKL_NUM_THREADS', '4')  # in place of")
    assert lines[0].split("  # ")[1].startswith(f"in place of the line at {script}:3")
    assert lines[1].startswith(
        f"os.environ['OMP_NUM_THREADS'] = '4'  # in place of the line at {script}:4"
    )
    # set in the shell, not by the script: the top of the script (after the imports) is the place
    script.write_text("import torch\n")
    g = fire(RULE, {**rec, "script": str(script)})
    assert g is not None and g.fix.startswith(
        "torch.set_num_threads(4)  # at the top of the script"
    )
