"""check's own measurements after the window are instruments too: a time limit from the step,
skipped with the reason when they cannot be clean, pairs at an epoch's start rejected, a thread
probe's impossible ratio treated as a failed measurement, and compiles they cause kept apart
from the script's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TRACES
from torchdoctor.capture import experiments
from torchdoctor.capture.experiments import (
    MAX_BUDGET_S,
    PATTERN,
    STEPS_PER_TOGGLE,
    Experiments,
    Plan,
    Toggle,
    plan,
)
from torchdoctor.record.run import RunRecord
from torchdoctor.rules.cpu_rules import implausible_probe
from torchdoctor.rules.run_rules import run_findings


def _toggle(log: list[str] | None = None) -> Toggle:
    log = log if log is not None else []
    return Toggle(
        "few-intra-op-threads", "2 threads", lambda: log.append("on"), lambda: log.append("off")
    )


# -- the plan ---------------------------------------------------------------------------------
def test_the_time_limit_scales_with_the_step() -> None:
    p = plan([100.0, 101.0, 99.0, 100.0], [0.0] * 4, toggles=2)
    assert p.skip is None and p.toggles == 2
    # 9 steps per toggle at the 100 ms median, 3x slack, two toggles: 5.4 s, not a flat 20 s
    assert p.budget_s == pytest.approx(2 * STEPS_PER_TOGGLE * 0.1 * 3)
    # millisecond steps get the floor: a switch's own cost must not cut them short
    assert plan([1.0, 1.1, 0.9], [0.0] * 3, toggles=1).budget_s == pytest.approx(2.0)
    # 500 ms steps: one toggle needs 4.5 s, 13.5 s with slack; four fit 20 s, capped at 20 s
    p = plan([500.0] * 4, [0.0] * 4, toggles=4)
    assert p.toggles == 4 and p.budget_s == pytest.approx(MAX_BUDGET_S)


def test_steps_of_75_s_skip_the_experiments_and_say_why() -> None:
    p = plan([75_000.0, 74_000.0, 76_000.0], [0.0] * 3, toggles=1)
    assert p.budget_s == 0.0 and p.toggles == 0
    assert p.skip is not None and "75.0 s" in p.skip and f"limit {MAX_BUDGET_S:.0f} s" in p.skip


def test_only_the_toggles_that_fit_the_limit_are_planned() -> None:
    # 1.5 s steps: one toggle needs 13.5 s; a second would pass 20 s
    p = plan([1500.0] * 5, [0.0] * 5, toggles=3)
    assert p.skip is None and p.toggles == 1


def test_uneven_steps_skip_the_experiments() -> None:
    p = plan([10.0, 40.0, 10.0, 40.0, 10.0, 40.0], [0.0] * 6, toggles=1)
    assert p.skip is not None and "uneven" in p.skip
    assert plan([10.0, 15.0, 9.0, 12.0], [0.0] * 4, toggles=1).skip is None


def test_no_window_no_experiments() -> None:
    assert plan([], [], toggles=1).skip is not None


# -- pairs ------------------------------------------------------------------------------------
def _measured(changed: list[float], base: list[float], cw: list[float], bw: list[float]) -> Toggle:
    t = _toggle()
    for c, b, w1, w2 in zip(changed, base, cw, bw, strict=True):
        t.record("changed", c, w1)
        t.record("baseline", b, w2)
    return t


def test_a_pair_at_an_epochs_start_is_rejected_not_averaged() -> None:
    ref = Plan(budget_s=10.0, toggles=1, step_ms=800.0, wait_ms=1.0)
    # pair 2's baseline step waited 14.6 s for its batch: workers restarted at an epoch's start
    t = _measured(
        [400.0, 410.0, 405.0, 395.0],
        [800.0, 15463.0, 805.0, 790.0],
        [1.0] * 4,
        [1.0, 14600.0, 1.0, 1.0],
    )
    r = t.result(ref)
    assert len(r.rejected_pairs) == 1 and "pair 2" in r.rejected_pairs[0]
    assert "epoch" in r.rejected_pairs[0]
    assert r.baseline_median_ms == pytest.approx(800.0)
    assert r.ratio == pytest.approx(400.0 / 800.0, rel=0.02)
    assert len(r.pair_ratios) == 3
    # without the reference every pair counts: the restart would move the median
    assert t.result(None).baseline_median_ms > 800.0


def test_a_baseline_step_far_beyond_the_window_is_rejected_even_without_a_wait() -> None:
    ref = Plan(budget_s=10.0, toggles=1, step_ms=800.0, wait_ms=0.0)
    t = _measured([400.0] * 4, [800.0, 15463.0, 805.0, 790.0], [0.0] * 4, [0.0] * 4)
    r = t.result(ref)
    assert len(r.rejected_pairs) == 1 and "19.3x" in r.rejected_pairs[0]


def test_too_few_clean_pairs_measure_nothing() -> None:
    ref = Plan(budget_s=10.0, toggles=1, step_ms=800.0, wait_ms=0.0)
    t = _measured(
        [15463.0, 802.0, 15000.0, 810.0],
        [15463.0, 16000.0, 14000.0, 802.0],
        [0.0] * 4,
        [14000.0, 15000.0, 13000.0, 0.0],
    )
    r = t.result(ref)
    assert r.ratio is None and r.skipped is not None and "1 clean pair" in r.skipped
    assert r.pair_ratios == ()


# -- the time limit ---------------------------------------------------------------------------
def test_the_extra_steps_stop_before_the_next_would_pass_the_limit(monkeypatch: Any) -> None:
    now = [0.0]
    monkeypatch.setattr(experiments.time, "perf_counter", lambda: now[0])
    log: list[str] = []
    ref = Plan(budget_s=5.0, toggles=1, step_ms=1000.0, wait_ms=0.0)
    ex = Experiments([_toggle(log)], ref.budget_s, ref)
    assert ex.begin()
    ticks = 0
    while True:
        now[0] += 1.0  # each extra step takes a second
        ticks += 1
        if not ex.tick(1.0):
            break
    # steps end at 1, 2, 3, 4 s; a fifth would end at 5 s: allowed; a sixth would pass 5 s
    assert ticks == 5 and now[0] <= ref.budget_s
    assert ex.stopped is not None and "limit" in ex.stopped
    assert log[-1] == "off"  # the user's setting is back
    (r,) = ex.results()
    assert r.error is not None and "cut short" in r.error


def test_a_skipped_toggle_is_never_switched_but_reported() -> None:
    log: list[str] = []
    skipped = Toggle.skip("few-intra-op-threads", "4 threads instead of 1", "the model is compiled")
    ex = Experiments([skipped, _toggle(log)], 100.0, None)
    assert ex.begin()
    while ex.tick(0.01):
        pass
    a, b = ex.results()
    assert a.skipped == "the model is compiled" and a.ratio is None and not a.changed_ms
    assert b.skipped is None and len(b.changed_ms) == len(PATTERN) // 2
    assert log.count("on") >= 1


def test_results_before_the_end_say_the_toggle_was_not_measured() -> None:
    ex = Experiments([_toggle()], 100.0, None)
    assert ex.begin()
    (r,) = ex.results()  # as in the record written before the first extra step
    assert r.ratio is None and "not measured" in r.skipped
    ex.abort()


# -- the thread probe -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("a", "b", "ratio", "failed"),
    [
        (16, 15, 281.45, True),  # an H200 run: GPU-bound, compiled
        (16, 15, 317.4, True),
        (16, 15, 4.5, True),  # one thread too many cannot do 4.5x
        (16, 15, 3.9, False),
        (64, 8, 7.2, False),  # a plausible slow-down for 56 threads too many
        (2, 1, 4.0, False),
    ],
)
def test_a_ratio_no_thread_count_can_produce_is_a_failed_measurement(
    a: int, b: int, ratio: float, failed: bool
) -> None:
    why = implausible_probe({"threads_a": a, "threads_b": b, "ratio_median": ratio})
    assert (why is not None) == failed
    if why:
        assert f"{ratio:.1f}x" in why


def _cpu_record(probe: dict[str, Any], gpu: bool, cpu_op_ms: float | None) -> dict[str, Any]:
    ops: dict[str, Any] = {"op_time_ms_per_step": 9.0}
    if cpu_op_ms is not None:
        ops["cpu_op_time_ms_per_step"] = cpu_op_ms
    rec: dict[str, Any] = {
        "exit": {"status": "stopped"},
        "steps": {"count": 6, "measured_steps": 3, "mean_step_ms": 25.0, "step_ms": [25.0] * 6},
        "ops": ops,
        "cpu": {
            "wall_s": 1.0,
            "process_cpu_s": 0.3,
            "cores": 16,
            "intra_op_threads": 16,
            "workers_cpu_s": None,
            "other_busy_cores": 1.1,
            "main_thread_runqueue_wait_s": 0.0,
            "thread_probe": probe,
        },
    }
    if gpu:
        rec["gpu"] = {"device": {"name": "NVIDIA H200"}}
    return rec


def _oversubscribed(rec: dict[str, Any]) -> list[Any]:
    return [
        f for f in run_findings(rec) if f.id == "cpu-oversubscribed" and f.saving_ms_per_step > 0
    ]


def test_an_impossible_probe_ratio_is_no_finding() -> None:
    probe = {"threads_a": 16, "threads_b": 15, "rounds": 9, "ratio_median": 281.45}
    assert not _oversubscribed(_cpu_record(probe, gpu=False, cpu_op_ms=None))
    plausible = {**probe, "ratio_median": 1.5}
    (f,) = _oversubscribed(_cpu_record(plausible, gpu=False, cpu_op_ms=None))
    assert f.saving_ms_per_step == pytest.approx(9.0 * (1 - 1 / 1.5))


def test_on_a_gpu_run_the_thread_finding_needs_cpu_operator_time() -> None:
    probe = {"threads_a": 16, "threads_b": 15, "rounds": 9, "ratio_median": 1.5}
    # 0.74 ms of CPU-computing operators in a 25 ms GPU step (the H200 GPT-2 compiled run)
    assert not _oversubscribed(_cpu_record(probe, gpu=True, cpu_op_ms=0.74))
    assert not _oversubscribed(_cpu_record(probe, gpu=True, cpu_op_ms=None))  # unknown: no claim
    # where CPU operators matter, the saving is bounded by their time, not the launch time
    (f,) = _oversubscribed(_cpu_record(probe, gpu=True, cpu_op_ms=6.0))
    assert f.saving_ms_per_step == pytest.approx(6.0 * (1 - 1 / 1.5))


H200_RUN = TRACES / "h200" / "runs" / "nanogpt_gpt2_compiled" / "run.json"


def test_the_h200_compiled_run_loses_its_thread_finding() -> None:
    if not H200_RUN.is_file():
        pytest.skip(f"{H200_RUN} not found")
    rec = json.loads(H200_RUN.read_text())
    assert rec["cpu"]["thread_probe"]["ratio_median"] > 200  # as recorded on the H200
    assert not _oversubscribed(rec)


def test_cpu_operator_time_of_a_gpu_trace_leaves_out_the_launching_operators() -> None:
    from torchdoctor.capture.trace_ops import summarise_trace

    path = TRACES / "h200" / "nanogpt_gpt2_compiled_check.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    d = summarise_trace(Path(path), 6)
    assert d["op_time_ms_per_step"] == pytest.approx(8.98, abs=0.01)
    # most operator time there is launching kernels: under a millisecond computes on the CPU
    assert d["cpu_op_time_ms_per_step"] == pytest.approx(0.742, abs=0.01)


# -- the report -------------------------------------------------------------------------------
def test_the_report_says_what_was_skipped_failed_and_compiled_by_check() -> None:
    from torchdoctor.report.account_text import experiments_text

    record = {
        "experiments": [
            {
                "id": "few-intra-op-threads",
                "toggle": "2 intra-op threads instead of 1",
                "skipped": "the model is compiled and the intra-op thread count is one of "
                "dynamo's guards: switching it would recompile",
            },
            {
                "id": "anomaly-detection",
                "toggle": "anomaly detection off",
                "ratio": 0.5,
                "baseline_median_ms": 20.0,
                "changed_median_ms": 10.0,
                "pair_ratios": [0.5, 0.5, 0.5],
                "rejected_pairs": ["pair 2 (10.0 ms changed, 900.0 ms baseline): an epoch's start"],
            },
        ],
        "cpu": {"thread_probe": {"failed": "281.5x slower with 16 threads than with 15"}},
        "compile": {"ours": {"compiles": 2, "compile_s": 1.25}},
    }
    text = experiments_text(RunRecord.from_dict(record))
    assert "2 intra-op threads instead of 1: not measured: the model is compiled" in text
    assert "anomaly detection off: 10.0 ms per step against 20.0 ms (3 pairs, 1 rejected" in text
    assert "thread probe: failed: 281.5x" in text
    assert "2 compile(s), 1.2 s" in text or "2 compile(s), 1.3 s" in text
    assert experiments_text(RunRecord.from_dict({"experiments": []})) == ""


def test_the_thread_probe_never_calls_the_scripts_recorded_setter(monkeypatch: Any) -> None:
    import types

    import torch

    from torchdoctor.capture import runner

    orig = torch.set_num_threads
    recorded: list[int] = []

    def wrapper(n: int) -> None:  # what ModeWatch installs while the session runs
        recorded.append(n)
        orig(n)

    monkeypatch.setattr(torch, "set_num_threads", wrapper)
    cpu = {"wall_s": 1.0, "cores": 2, "intra_op_threads": 4, "other_busy_cores": 0.0}
    modes = types.SimpleNamespace(originals={"set_num_threads": orig})
    session = types.SimpleNamespace(cpu=cpu, accounting=types.SimpleNamespace(modes=modes))
    before = torch.get_num_threads()
    runner._probe_threads(session)
    assert cpu["thread_probe"]["threads_a"] == 4 and cpu["thread_probe"]["rounds"] >= 3
    assert recorded == []  # the probe's switches are not the script's calls
    assert torch.get_num_threads() == before
    runner._probe_threads(session)  # once per run: the record written again does not re-probe
    assert recorded == []
