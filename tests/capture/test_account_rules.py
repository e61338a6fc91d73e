"""The step's account and the mode / repeated-work rules on hand-written records: each rule
fires on the evidence it needs and stays quiet without it; savings worked out by hand."""

from __future__ import annotations

from typing import Any

import pytest

from torchdoctor.rules.account_rules import account_verdict, step_account, unexplained
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.run_rules import run_findings


def record(step_ms: float = 100.0, **sections: Any) -> dict[str, Any]:
    return {
        "steps": {
            "mean_step_ms": step_ms,
            "median_step_ms": step_ms,
            "measured_steps": 5,
            "count": 10,
        },
        **sections,
    }


def lines(rows: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    cats: dict[str, float] = {}
    for r in rows:
        for k, v in r["under"].items():
            cats[k] = cats.get(k, 0.0) + v
    return {"rows": rows, "categories": cats, **extra}


def row(site: str, **under: float) -> dict[str, Any]:
    total = sum(under.values())
    return {
        "site": site,
        "function": "main",
        "code": "x",
        "self_ms": total,
        "inclusive_ms": total,
        "under": under,
        "ops": [],
    }


def roof(roofline_ms: float, step_ms: float = 100.0) -> dict[str, Any]:
    return {
        "efficiency": {
            "roofline_ms": roofline_ms,
            "share": roofline_ms / step_ms,
            "step_ms": step_ms,
            "flops_share": 0.1,
            "bytes_share": 0.1,
        },
        "attainable": {"source": "measured"},
    }


def ids(rec: dict[str, Any]) -> list[str]:
    return [f.id for f in run_findings(rec)]


# -- the account ---------------------------------------------------------------------------------
def test_a_step_near_its_roofline_is_explained() -> None:
    rec = record(
        lines=lines([row("t.py:5", **{"torch ops": 95.0, "Python": 5.0})]), roofline=roof(40.0)
    )
    a = step_account(rec, [])
    # 40 ms of roofline allow 120 ms of compute, capped at the 95 ms inside operators: the 5 ms
    # of the user's own Python stay unexplained, under the threshold
    assert a is not None and a.explained and a.allowance_ms == pytest.approx(95.0)
    assert a.unexplained_ms == pytest.approx(5.0)
    assert unexplained(rec, []) is None


def test_never_more_unexplained_than_the_step_above_its_floor() -> None:
    """A step at 90% of its floor leaves at most 10% to save, however much of it the sampler
    put under Python (a healthy conv inference step read 87% of its fusion floor, with 4.5 ms
    of 22.9 under Python: the account called 18% unexplained, more than could be saved)."""
    rec = record(
        lines=lines([row("t.py:5", **{"torch ops": 70.0, "Python": 30.0})]), roofline=roof(90.0)
    )
    a = step_account(rec, [])
    # the operators' 70 ms are the allowance; 30 ms left, capped at the 100 - 90 above the floor
    assert a is not None and a.allowance_ms == pytest.approx(70.0)
    assert a.unexplained_ms == pytest.approx(10.0) and a.explained
    assert unexplained(rec, []) is None
    # far from its floor the same Python stays unexplained
    far = record(
        lines=lines([row("t.py:5", **{"torch ops": 70.0, "Python": 30.0})]), roofline=roof(20.0)
    )
    f = unexplained(far, [])
    assert f is not None and f.saving_ms_per_step == pytest.approx(40.0)


def test_the_roofline_never_explains_io_and_info_findings_explain_nothing() -> None:
    rec = record(
        lines=lines([row("t.py:9", **{"I/O": 60.0}), row("t.py:5", **{"torch ops": 40.0})]),
        roofline=roof(40.0),  # a roofline that would cover the whole step
    )
    note = Finding("host-syncs-in-step", "t", "info", 50.0, 0.5, {}, "fix")
    f = unexplained(rec, [note])
    assert f is not None and f.saving_ms_per_step == pytest.approx(60.0)
    assert f.where[0] == "t.py:9" and "(I/O)" in f.title and "I/O in the step" in f.fix


def test_python_outside_operators_is_unexplained_and_named_by_line() -> None:
    rec = record(
        lines=lines([row("t.py:9", Python=60.0), row("t.py:5", **{"torch ops": 40.0})]),
        roofline=roof(10.0),
    )
    f = unexplained(rec, [])
    assert f is not None and f.id == "unexplained-step-time"
    # allowance 10/(1/3) = 30 ms; 100 - 30 = 70 ms unexplained
    assert f.saving_ms_per_step == pytest.approx(70.0)
    assert f.where[0] == "t.py:9" and "t.py:9" in f.title and "(Python)" in f.title
    assert "plain Python" in f.fix


def test_named_findings_and_contention_explain_time() -> None:
    rec = record(
        lines=lines(
            [
                row("t.py:9", Python=50.0, **{"CPU contention": 20.0}),
                row("t.py:5", **{"torch ops": 30.0}),
            ]
        ),
        roofline=roof(10.0),
    )
    named = Finding("host-syncs-in-step", "t", "warning", 45.0, 0.45, {}, "fix")
    a = step_account(rec, [named])
    assert a is not None
    assert (a.named_ms, a.contention_ms) == (45.0, 20.0)
    assert a.unexplained_ms == pytest.approx(5.0) and a.explained
    assert unexplained(rec, [named]) is None


def _loaded(
    gross: list[float], waits: list[float], roofline_ms: float = 3.0, **under: float
) -> dict[str, Any]:
    """Seven warm-up steps then three measured ones (``gross`` ms, ``waits`` ms of each waiting
    for a core), the window's mix of time ``under`` (ms at the median step's scale)."""
    rec = record(
        step_ms=sorted(gross)[1], lines=lines([row("t.py:5", **under)]), roofline=roof(roofline_ms)
    )
    rec["steps"].update(step_ms=[10.0] * 7 + gross, warmup_steps=7, measured_steps=3, count=10)
    rec["monitor"] = {"step_core_wait_ms": [0.0] * 7 + waits}
    return rec


def test_the_median_step_is_judged_by_its_own_time_on_a_loaded_machine() -> None:
    """A healthy loop of 10 ms steps under load: the measured steps took 10, 80 (70 waiting for
    a core) and 340 ms (40 waiting; its operators' threads waited too, which its own thread
    cannot count). The window's mix, set by the 340 ms step, is 74% operators: at the median
    step's 80 ms that read 59.5 ms of operators against a 9 ms allowance, 63% unexplained.
    The median step's own time is 10 ms: 1 ms unexplained."""
    rec = _loaded(
        [10.0, 80.0, 340.0], [0.0, 70.0, 40.0], **{"torch ops": 59.5, "CPU contention": 20.5}
    )
    a = step_account(rec, [])
    assert a is not None and a.step_ms == 80.0
    assert a.contention_ms == pytest.approx(70.0) and a.allowance_ms == pytest.approx(9.0)
    assert a.unexplained_ms == pytest.approx(1.0) and a.explained
    assert unexplained(rec, []) is None
    del rec["monitor"]  # without the per-step reading: the window's mix at the median step
    a = step_account(rec, [])
    assert a is not None and a.unexplained_ms == pytest.approx(50.5)
    assert unexplained(rec, []) is not None


def test_the_median_step_is_paired_with_its_own_wait() -> None:
    """A control at load 16 (recorded): the window's steps took 161.8, 160.1 and 519.6 ms, of
    which 116.7, 87.8 and 422.7 waiting for a core. The median step (161.8 ms) had 45.1 ms of
    its own, 12.1 ms beyond its 33 ms allowance: quiet. Paired with another step's own time
    (the median of the three, 72.3 ms) it read 39.3 ms, 24% unexplained."""
    rec = _loaded(
        [161.8, 160.1, 519.6],
        [116.7, 87.8, 422.7],
        roofline_ms=11.0,
        **{"torch ops": 42.1, "CPU contention": 119.7},
    )
    a = step_account(rec, [])
    assert a is not None and a.contention_ms == pytest.approx(116.7)
    assert a.unexplained_ms == pytest.approx(12.1) and a.explained
    assert unexplained(rec, []) is None


def test_python_time_under_load_stays_unexplained() -> None:
    """Every measured step runs 40 ms of its own (30 of the user's Python) and waits 20-60 ms
    for a core: its Python is still unexplained, 31 of the 80 ms median step."""
    rec = _loaded([60.0, 80.0, 100.0], [20.0, 40.0, 60.0],
                  **{"Python": 30.0, "torch ops": 10.0, "CPU contention": 40.0})  # fmt: skip
    a = step_account(rec, [])
    assert a is not None and a.contention_ms == pytest.approx(40.0)
    assert a.unexplained_ms == pytest.approx(31.0)
    f = unexplained(rec, [])
    assert f is not None and f.title.startswith("39% of the step (31.0 ms) is not explained")


def test_no_roofline_is_never_a_clean_bill() -> None:
    rec = record(
        lines=lines([row("t.py:5", **{"torch ops": 100.0})]), roofline={"unavailable": "compiled"}
    )
    a = step_account(rec, [])
    assert a is not None and not a.explained and a.unexplained_ms == 0  # nothing to report ...
    line = account_verdict(
        "3 steps, 100.0 ms per step (CPU only). No bottleneck worth fixing found.", a.to_dict()
    )
    assert "No bottleneck" not in line and "efficiency is unknown" in line  # ... and no clean bill


def test_the_clean_bill_stays_when_explained() -> None:
    rec = record(lines=lines([row("t.py:5", **{"torch ops": 100.0})]), roofline=roof(60.0))
    a = step_account(rec, [])
    assert a is not None and a.explained
    text = "3 steps. No bottleneck worth fixing found."
    assert account_verdict(text, a.to_dict()) == text


# -- modes ---------------------------------------------------------------------------------------
def experiment(fid: str, base: float, changed: float) -> dict[str, Any]:
    return {
        "id": fid,
        "toggle": "off",
        "baseline_median_ms": base,
        "changed_median_ms": changed,
        "ratio": changed / base,
        "pair_ratios": [changed / base] * 4,
    }


def test_anomaly_detection_measured_and_estimated() -> None:
    on = {
        "anomaly_detection": True,
        "setter_calls": [{"call": "set_detect_anomaly", "value": True, "site": "t.py:3"}],
    }
    measured = record(modes=on, experiments=[experiment("anomaly-detection", 80.0, 40.0)])
    (f,) = [f for f in run_findings(measured) if f.id == "anomaly-detection"]
    assert f.saving_ms_per_step == pytest.approx(50.0)  # 1 - 40/80 of the 100 ms step
    assert f.where == ["t.py:3"] and "measured 80.0 ms" in f.title and "t.py:3" in f.fix
    (est,) = [f for f in run_findings(record(modes=on)) if f.id == "anomaly-detection"]
    assert est.saving_ms_per_step == pytest.approx(50.0) and est.evidence["estimated"]
    sampled = record(modes={}, lines={"rows": [], "modes_on_share": {"anomaly_detection": 0.5}})
    assert "anomaly-detection" in ids(sampled)  # on around the step only: seen by the sampler
    assert "anomaly-detection" not in ids(record(modes={"anomaly_detection": False}))


def test_threads_need_a_measured_gain() -> None:
    modes = {"intra_op_threads": 1, "cores_per_rank": 8, "thread_env": {"OMP_NUM_THREADS": "1"}}
    assert "few-intra-op-threads" not in ids(record(modes=modes))  # not measured: no claim
    slower = record(modes=modes, experiments=[experiment("few-intra-op-threads", 50.0, 70.0)])
    assert "few-intra-op-threads" not in ids(slower)  # more threads were slower here
    faster = record(modes=modes, experiments=[experiment("few-intra-op-threads", 50.0, 20.0)])
    (f,) = [f for f in run_findings(faster) if f.id == "few-intra-op-threads"]
    assert f.saving_ms_per_step == pytest.approx(60.0) and "set_num_threads(8)" in f.fix
    assert "OMP_NUM_THREADS=8" in f.fix


def test_deterministic_is_info_unless_measured() -> None:
    on = {"deterministic_algorithms": True}
    (f,) = [f for f in run_findings(record(modes=on)) if f.id == "deterministic-algorithms"]
    assert f.severity == "info" and f.saving_ms_per_step == 0
    rec = record(modes=on, experiments=[experiment("deterministic-algorithms", 36.0, 25.0)])
    (f,) = [f for f in run_findings(rec) if f.id == "deterministic-algorithms"]
    assert f.severity == "critical" and f.saving_ms_per_step == pytest.approx(
        100 * (1 - 25 / 36), abs=1e-3
    )


def test_grad_without_backward_names_the_forward_line() -> None:
    fw = {
        "unreached": [{"site": "t.py:40", "module": "Net", "calls": 1, "graphs": 1, "reached": 0}]
    }
    rec = record(forwards=fw, lines=lines([row("t.py:40", **{"torch ops": 80.0})]))
    (f,) = [f for f in run_findings(rec) if f.id == "grad-without-backward"]
    assert f.saving_ms_per_step == pytest.approx(12.0)  # 15% of the forward's 80 ms
    assert f.where == ["t.py:40"] and "inference_mode" in f.fix and "# at t.py:40" in f.fix
    measured = record(forwards=fw, experiments=[experiment("grad-without-backward", 100.0, 70.0)])
    (f,) = [f for f in run_findings(measured) if f.id == "grad-without-backward"]
    assert f.saving_ms_per_step == pytest.approx(30.0)
    assert "grad-without-backward" not in ids(record(forwards={"unreached": []}))


def test_repeated_construction_kinds_and_savings() -> None:
    rows = [
        {"kind": "optimizer", "site": "t.py:20", "what": "Adam", "calls": 5, "seconds": 0.05},
        {"kind": "module", "site": "t.py:30", "what": "Linear", "calls": 5, "seconds": 0.0},
        {"kind": "dataloader", "site": "t.py:9", "what": "DataLoader", "calls": 1, "seconds": 0.2},
    ]
    rec = record(repeats=rows, lines=lines([row("t.py:30", **{"torch ops": 7.0})]))
    (f,) = [f for f in run_findings(rec) if f.id == "repeated-construction"]
    # Adam: 50 ms over 5 steps; the Linear: its line's 7 ms; the loader (once in 5) is no repeat
    assert f.saving_ms_per_step == pytest.approx(17.0)
    assert (
        f.where == ["t.py:20", "t.py:30"] and "Adam" in f.title and "once, before the loop" in f.fix
    )


def test_piled_up_hooks_cost_their_own_time() -> None:
    rows = [
        {
            "kind": "hook",
            "site": "t.py:12",
            "what": "Tensor.register_hook",
            "calls": 130,
            "seconds": 0.001,
            "hook_functions": [["t.py", "clip"]],
        }
    ]
    hook_row = {**row("t.py:8", Python=20.0), "function": "clip"}
    rec = record(repeats=rows, lines=lines([hook_row]))
    (f,) = [f for f in run_findings(rec) if f.id == "repeated-construction"]
    # 10 steps seen: 10 hooks per parameter run where 1 would; 90% of the hooks' 20 ms
    assert f.saving_ms_per_step == pytest.approx(0.2 + 18.0)


def test_float64_gc_and_backend() -> None:
    work = {
        "by_dtype": {"fp64": {"flops": 9e9, "bytes": 1e8}, "fp32": {"flops": 1e9, "bytes": 1e7}}
    }
    rec = record(roofline={"work": work}, lines=lines([row("t.py:5", **{"torch ops": 80.0})]))
    (f,) = [f for f in run_findings(rec) if f.id == "float64-compute"]
    assert f.saving_ms_per_step == pytest.approx(0.5 * 0.9 * 80.0) and "90%" in f.title
    gc_lines = lines([{**row("t.py:50", gc=30.0), "code": "gc.collect()"}], gc_ms_per_step=30.0)
    (g,) = [f for f in run_findings(record(lines=gc_lines)) if f.id == "gc-in-step"]
    assert g.saving_ms_per_step == 30.0 and g.where == ["t.py:50"] and "gc.collect()" in g.title
    off = record(
        modes={"mkldnn_enabled": False, "mkldnn_available": True},
        experiments=[experiment("backend-disabled", 180.0, 108.0)],
    )
    (b,) = [f for f in run_findings(off) if f.id == "backend-disabled"]
    assert b.saving_ms_per_step == pytest.approx(40.0) and "mkldnn.enabled = True" in b.fix
    assert "backend-disabled" not in ids(record(modes={"mkldnn_enabled": True}))


def test_host_bound_no_longer_claims_the_users_own_python() -> None:
    ops = {
        "gemm_share_basis": "cpu",
        "top_level_ops_per_step": 300,
        "median_op_us": 5.0,
        "tiny_op_threshold_us": 20.0,
        "op_time_ms_per_step": 10.0,
        "tiny_op_time_ms_per_step": 5.0,
        "gemm_share": 0.1,
    }
    base = {"ops": ops}
    (before,) = [f for f in run_findings(record(**base)) if f.id == "host-bound"]
    assert before.saving_ms_per_step == pytest.approx(0.7 * (5.0 + 90.0))
    sampled = lines(
        [row("t.py:9", **{"I/O": 80.0, "Python": 10.0})],
        python_by_owner={"user": 4.0, "torch": 6.0},
    )
    (after,) = [f for f in run_findings(record(lines=sampled, **base)) if f.id == "host-bound"]
    assert after.saving_ms_per_step == pytest.approx(0.7 * (5.0 + 6.0))


def test_workers_restarted_every_step_replace_the_dataloader_advice() -> None:
    from torchdoctor.capture.fit import fit_to_run

    rows = [
        {
            "kind": "dataloader iterator",
            "site": "t.py:30",
            "what": "DataLoader.__iter__",
            "calls": 5,
            "seconds": 0.05,
        }
    ]
    loader = {"num_workers": 2, "batch_size": 64, "pin_memory": False, "cpus_per_rank": 2}
    rec = record(repeats=rows, config={"dataloaders": [loader]})
    rec["steps"]["mean_data_wait_ms"] = 60.0
    found = run_findings(rec)
    (f,) = [f for f in found if f.id == "repeated-construction"]
    assert f.saving_ms_per_step == pytest.approx(10.0 + 60.0)  # iter() itself, then the wait
    assert "dataloader-config" in [g.id for g in found]  # the data wait fires its own rule ...
    fitted = [g.id for g in fit_to_run(found, rec)]
    assert "dataloader-config" not in fitted and "repeated-construction" in fitted  # ... not kept
    assert "persistent_workers=True" in f.fix


def test_the_input_pipeline_seen_through_the_line_table() -> None:
    from torchdoctor.capture.fit import fit_to_run

    trace = Finding("input-pipeline", "Input pipeline", "critical", 30.0, 0.3, {}, "fix")
    gc_lines = lines([{**row("t.py:50", gc=28.0), "code": "gc.collect()"}], gc_ms_per_step=28.0)
    assert fit_to_run([trace], record(lines=gc_lines)) == []  # the collector, not the input
    py = lines([row("t.py:12", Python=25.0), row("t.py:20", **{"torch ops": 75.0})])
    (kept,) = fit_to_run([trace], record(lines=py))
    assert kept.where == ["t.py:12"]  # the line producing the batch
    other = Finding(
        "repeated-construction", "t", "warning", 20.0, 0.2, {}, "fix", where=["t.py:12"]
    )
    assert [f.id for f in fit_to_run([trace, other], record(lines=py))] == ["repeated-construction"]


def test_framework_python_is_told_apart_from_torch_formatting() -> None:
    import importlib

    import torch._tensor_str
    import torch.nn.modules.module

    from torchdoctor.code_paths import CodePaths
    from torchdoctor.record.lines import LineTable
    from torchdoctor.rules.account_inputs import python_ms_of_framework

    paths = CodePaths()
    assert paths.detail(torch.nn.modules.module.__file__) == "torch:nn"
    assert paths.detail(importlib.import_module("torch.optim.adam").__file__) == "torch:optim"
    assert paths.detail(torch._tensor_str.__file__) == "torch:_tensor_str"
    owners = {"torch:nn": 3.0, "torch:_tensor_str": 40.0, "pkg:lightning": 1.0, "user": 9.0}
    assert python_ms_of_framework(LineTable(python_by_owner=owners)) == 4.0
    # compiled code's guards and runtime wrappers are framework overhead; collating, saving and
    # printing are work the user asked for
    compiled = {"torch:_dynamo": 2.0, "torch:_functorch": 1.0, "torch": 0.5, "torch:utils": 8.0}
    assert python_ms_of_framework(LineTable(python_by_owner=compiled)) == 3.5
    saving = {"torch:serialization": 5.0}
    assert python_ms_of_framework(LineTable(python_by_owner=saving)) == 0.0


def _threads(ratio: float, failed: bool = False) -> dict[str, Any]:
    """``run.json``'s ``cpu`` with a thread probe that read ``ratio`` (2 threads against 1)."""
    probe: dict[str, Any] = {"threads_a": 2, "threads_b": 1, "rounds": 6, "ratio_median": ratio}
    if failed:
        probe["failed"] = f"{ratio:.1f}x slower with 2 threads than with 1: ..."
    return {"wall_s": 4.0, "intra_op_threads": 2, "cores": 2, "thread_probe": probe}


def test_operator_time_lost_to_threads_on_busy_cores_is_the_machines() -> None:
    """conv_lstm_step.py on a 2-core machine at load 22 with 2 intra-op threads: 90 ms of its
    100 ms step in torch operators against a 30 ms allowance (roofline 10 ms). Its thread probe
    read 10x slower with 2 threads than with 1 (called failed, above 4x per thread); measured
    in one process, interleaved, the step ran 9.4x slower with 2. The operators' time beyond
    the allowance is the threads waiting on one another: 60 ms of 90 * (1 - 1/10) = 81 ms."""
    rec = record(lines=lines([row("t.py:32", **{"torch ops": 90.0})]), roofline=roof(10.0))
    a = step_account(rec, [])
    assert a is not None and a.unexplained_ms == pytest.approx(70.0)  # 100 - 30
    rec["cpu"] = _threads(10.0, failed=True)
    a = step_account(rec, [])
    assert a is not None and a.threads_wait_ms == pytest.approx(60.0)
    assert a.unexplained_ms == pytest.approx(10.0) and a.explained
    assert unexplained(rec, []) is None
    # a smaller slow-down explains only its share: 90 * (1 - 1/1.5) = 30 ms
    rec["cpu"] = _threads(1.5)
    a = step_account(rec, [])
    assert a is not None and a.threads_wait_ms == pytest.approx(30.0)
    assert a.unexplained_ms == pytest.approx(40.0)
    # below OVERSUBSCRIBED_RATIO the probe is noise, and where cpu-oversubscribed fires its
    # saving is named already: not counted twice
    rec["cpu"] = _threads(1.1)
    assert step_account(rec, []).threads_wait_ms == 0.0  # type: ignore[union-attr]
    rec["cpu"] = _threads(10.0)
    threads = Finding("cpu-oversubscribed", "t", "warning", 20.0, 0.2, {}, "f", "", "")
    a = step_account(rec, [threads])
    assert a is not None and a.threads_wait_ms == 0.0 and a.named_ms == 20.0
    # a GPU run's operator time on the host is launches: a CPU probe says nothing of it
    a = step_account({**rec, "gpu": {"name": "NVIDIA H200"}}, [])
    assert a is not None and a.threads_wait_ms == 0.0
    # the report's roofline line says where that time went
    from torchdoctor.record.run import RunRecord
    from torchdoctor.report.account_text import roofline_line

    rec["cpu"] = _threads(10.0, failed=True)
    a = step_account(rec, [])
    assert a is not None
    text = roofline_line(RunRecord.from_dict(rec), a.to_dict())
    assert "60.0 ms of operators whose intra-op threads waited for one another" in text


def _stepped(threads_wait_ms: list[float | None], probe: dict[str, Any] | None) -> dict[str, Any]:
    """A 100 ms median step (90 ms of torch operators against a 30 ms allowance) whose five
    measured steps (after two warm-up steps) recorded the intra-op threads' wait for a core
    beyond the step's own (``cpu.step_threads_wait_ms``), and the thread probe's record."""
    rec = record(lines=lines([row("t.py:32", **{"torch ops": 90.0})]), roofline=roof(10.0))
    rec["steps"] |= {
        "warmup_steps": 2,
        "step_ms": [300.0, 200.0, 90.0, 95.0, 100.0, 105.0, 110.0],
        "count": 7,
    }
    cpu = {k: v for k, v in _threads(1.0).items() if k != "thread_probe"}
    rec["cpu"] = {**cpu, "step_threads_wait_ms": threads_wait_ms}
    if probe is not None:
        rec["cpu"]["thread_probe"] = probe
    return rec


def test_a_failed_thread_probe_leaves_the_threads_own_wait_in_the_median_step() -> None:
    """The probe failed (207x, labelled) or never ran: the operators' time lost to threads
    waiting for one another is the helpers' own wait for a core in the median measured step
    (100 ms, the fifth step: 42 ms), not the probe's ratio (which would claim all 60 ms)."""
    waits = [0.0, 0.0, 5.0, 7.0, 42.0, 50.0, 51.0]
    failed = _threads(207.2, failed=True)["thread_probe"]
    unslowed = _threads(0.7)["thread_probe"]  # plausible, but no slow-down found
    for probe, why in (
        (failed, "its 207.2x is labelled failed"),
        (None, "did not run"),
        (unslowed, "it read 0.7x, no slow-down"),
    ):
        rec = _stepped(waits, probe)
        a = step_account(rec, [])
        assert a is not None and a.threads_wait_ms == pytest.approx(42.0)
        assert a.unexplained_ms == pytest.approx(28.0)  # 100 - 30 allowance - 42
        assert a.threads_wait_from is not None and why in a.threads_wait_from
        assert "own wait for a core in the median step" in a.threads_wait_from
    # a probe that errored: the same
    rec = _stepped(waits, {"error": "RuntimeError: boom"})
    a = step_account(rec, [])
    assert a is not None and a.threads_wait_ms == pytest.approx(42.0)
    assert "not the thread probe: it failed (RuntimeError: boom)" in (a.threads_wait_from or "")
    # never more than the operators' time beyond the allowance (60 ms)
    a = step_account(_stepped([0.0, 0.0, 80.0, 80.0, 80.0, 80.0, 80.0], None), [])
    assert a is not None and a.threads_wait_ms == pytest.approx(60.0)
    # a measured step whose wait is unknown: the steps' figure is not taken
    a = step_account(_stepped([0.0, 0.0, 5.0, None, 42.0, 50.0, 51.0], None), [])
    assert a is not None and a.threads_wait_ms == 0.0 and a.threads_wait_from is None


def test_threads_that_did_not_wait_leave_a_real_gap_unexplained() -> None:
    """On free cores the helpers never wait: a failed probe explains nothing then, and the 70 ms
    of operator time beyond the allowance is still a finding."""
    for ratio, failed in ((207.2, True), (0.7, False)):
        rec = _stepped([0.0] * 7, _threads(ratio, failed=failed)["thread_probe"])
        a = step_account(rec, [])
        assert a is not None and a.threads_wait_ms == 0.0
        assert a.unexplained_ms == pytest.approx(70.0)
        found = unexplained(rec, [])
        assert found is not None and found.severity in ("warning", "critical")


def test_a_probe_that_measured_is_capped_by_the_threads_own_wait() -> None:
    """A plausible probe (3x: 90 * (1 - 1/3) = 60 ms) says more than the script's threads waited
    in its median step (20 ms): the steps' own wait is the measured bound, and the report says
    why the probe's figure was not taken."""
    probe = _threads(3.0)["thread_probe"]
    rec = _stepped([0.0, 0.0, 1.0, 2.0, 20.0, 30.0, 30.0], probe)
    a = step_account(rec, [])
    assert a is not None and a.threads_wait_ms == pytest.approx(20.0)
    assert "not the thread probe: its 60.0 ms is more than they waited" in (
        a.threads_wait_from or ""
    )
    # one that says less than the threads waited stands as measured: 90 * (1 - 1/1.5) = 30 ms
    rec = _stepped([0.0, 0.0, 1.0, 2.0, 55.0, 60.0, 60.0], _threads(1.5)["thread_probe"])
    a = step_account(rec, [])
    assert a is not None and a.threads_wait_ms == pytest.approx(30.0)
    assert (a.threads_wait_from or "").startswith("the thread probe: 1.5x")
    from torchdoctor.record.run import RunRecord
    from torchdoctor.report.account_text import roofline_line

    text = roofline_line(RunRecord.from_dict(rec), a.to_dict())
    assert "waited for one another on the busy cores: the thread probe: 1.5x" in text
