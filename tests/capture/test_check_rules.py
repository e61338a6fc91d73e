"""Run-level rules on hand-written run records: each fires on its evidence, stays quiet
without it, and never claims more than the step."""

from __future__ import annotations

from typing import Any

import pytest

from torchdoctor.rules import run_rules
from torchdoctor.rules.families import RUN_FAMILY_RULES
from torchdoctor.rules.run_rules import run_findings


def record(**parts: Any) -> dict[str, Any]:
    """A minimal run.json: 10 measured steps of 20 ms, nothing else."""
    base: dict[str, Any] = {
        "exit": {"status": "stopped", "code": 0},
        "steps": {
            "count": 15,
            "measured_steps": 10,
            "mean_step_ms": 20.0,
            "mean_data_wait_ms": 0.0,
            "step_ms": [20.0] * 15,
        },
        "compile": {"compiles": 0, "recompiles": 0, "graph_breaks": []},
        "config": {"dataloaders": [], "autocast": [], "grad_scalers": [], "optimizers": []},
        "syncs": {"host_syncs": [], "unpinned_non_blocking": [], "sync_debug": []},
        "gpu": None,
        "ops": None,
    }
    for key, value in parts.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


def ids(rec: dict[str, Any]) -> list[str]:
    return [f.id for f in run_findings(rec)]


def test_quiet_record_has_no_findings() -> None:
    assert run_findings(record()) == []


def test_recompiles_after_warmup_cost_their_compile_time() -> None:
    rec = record(
        compile={
            "compiles": 5,
            "recompiles": 4,
            "recompile_s": 2.0,
            "recompiles_in_window": 2,
            "recompile_s_in_window": 0.1,
            "recompile_events": [
                {"site": "m.py:3", "function": "forward", "reason": "0/0: tensor 'x' size mismatch"}
            ],
        }
    )
    (f,) = run_findings(rec)
    assert f.id == "recompiles" and f.saving_ms_per_step == pytest.approx(10.0)
    assert f.severity == "critical" and "mark_dynamic" in f.fix and f.where == ["m.py:3 (forward)"]


def test_warmup_only_recompiles_are_a_one_time_cost() -> None:
    rec = record(compile={"recompiles": 1, "recompile_s": 100.0, "recompile_events": []})
    (f,) = run_findings(rec)
    assert f.saving_ms_per_step == 0.0 and f.severity == "info"
    # a run that ended by itself: amortised over its 15 steps, capped by the 20 ms step
    (done,) = run_findings({**rec, "exit": {"status": "completed", "code": 0}})
    assert done.saving_ms_per_step == 20.0 and done.share_of_step == 1.0


def test_graph_breaks_point_at_the_user_line() -> None:
    breaks = [{"site": "model.py:19", "reason": "data-dependent branching", "count": 3}]
    (f,) = run_findings(record(compile={"graph_breaks": breaks}))
    assert f.id == "graph-breaks" and f.where == ["model.py:19"] and "model.py:19" in f.fix
    assert f.severity == "warning" and f.saving_ms_per_step == pytest.approx(1.0)


def test_recompile_limit_hit() -> None:
    hit = {"limit": 8, "function": "forward", "site": "m.py:3", "last_reason": "size"}
    assert ids(record(compile={"recompile_limit_hits": [hit]})) == ["recompile-limit-hit"]


def test_compile_not_repaid_weighed_against_the_jobs_length() -> None:
    compiled = {"compiles": 1, "compile_s": 5.0}
    # stopped by check, length unknown: the break-even only, as info (5 s = 250 steps of 20 ms)
    (f,) = run_findings(record(compile=compiled))
    assert f.severity == "info" and f.saving_ms_per_step == 0 and "250 steps" in f.title
    done = record(compile=compiled, exit={"status": "completed", "code": 0})
    (f,) = run_findings(done)
    assert f.id == "compile-not-repaid" and f.saving_ms_per_step == 20.0
    # stopped, but the script says it runs 20 steps: 5 s of compile against 0.4 s of steps
    job = {"name": "max_iters", "value": 20, "unit": "steps"}
    tuned = {**compiled, "compile_calls": [{"mode": "max-autotune"}]}
    (f,) = run_findings(record(compile=tuned, job=job))
    assert "job of 20 steps (max_iters = 20)" in f.title and f.severity != "info"
    assert f.fix.startswith("model = torch.compile(model)  # not mode='max-autotune'")


LOADER = {"num_workers": 0, "pin_memory": False, "batch_size": 16, "cpu_count": 4}


def test_dataloader_wait_with_no_workers() -> None:
    rec = record(steps={"mean_data_wait_ms": 8.0}, config={"dataloaders": [LOADER]})
    (f,) = run_findings(rec)
    assert f.id == "dataloader-config" and f.saving_ms_per_step == 8.0
    # a batch costs its 8 ms wait; 12 ms of compute per step: two workers make one each in
    # half the compute time (not one per CPU: idle workers only compete for the cores)
    assert "num_workers=2" in f.fix and f.severity == "critical"


def test_dataloader_quiet_when_batches_are_ready() -> None:
    rec = record(steps={"mean_data_wait_ms": 0.2}, config={"dataloaders": [LOADER]})
    assert ids(rec) == []
    on_gpu = record(config={"dataloaders": [LOADER]}, gpu={"memory": {}})
    (f,) = run_findings(on_gpu)
    assert f.id == "dataloader-config" and f.severity == "info" and "pin_memory" in f.fix


def test_dataloader_quiet_when_the_wait_is_below_a_worker_hand_off() -> None:
    """A tiny step (3 ms) that waits 0.25 ms (8%) for an in-memory batch: workers cannot remove
    a wait smaller than their own hand-off, so no finding; 0.6 ms of the same step is one."""
    tiny = {"median_step_ms": 3.0, "mean_step_ms": 3.0, "step_ms": [3.0] * 15}
    small = record(steps={**tiny, "mean_data_wait_ms": 0.25}, config={"dataloaders": [LOADER]})
    assert ids(small) == []
    larger = record(steps={**tiny, "mean_data_wait_ms": 0.6}, config={"dataloaders": [LOADER]})
    assert ids(larger) == ["dataloader-config"]


def test_item_per_step_on_cpu_is_info_on_gpu_a_warning() -> None:
    row = {"kind": "item", "device": "cpu", "site": "t.py:9", "calls": 10, "seconds": 1e-5}
    (cpu,) = run_findings(record(syncs={"host_syncs": [row]}))
    assert cpu.id == "host-syncs-in-step" and cpu.severity == "info" and cpu.where == ["t.py:9"]
    gpu_row = {**row, "device": "cuda", "seconds": 0.02}
    (gpu,) = run_findings(record(syncs={"host_syncs": [gpu_row]}))
    assert gpu.saving_ms_per_step == pytest.approx(2.0) and gpu.severity == "warning"


def test_rare_syncs_are_not_per_step() -> None:
    row = {"kind": "item", "device": "cuda", "site": "t.py:9", "calls": 2, "seconds": 0.01}
    assert ids(record(syncs={"host_syncs": [row]})) == []


def test_unpinned_non_blocking() -> None:
    row = {"site": "t.py:4", "copies": 10, "bytes": 10 * 80_000_000}
    (f,) = run_findings(record(syncs={"unpinned_non_blocking": [row]}))
    # 80 MB per step at 8 GB/s: 10 ms
    assert f.id == "unpinned-non-blocking" and f.saving_ms_per_step == pytest.approx(10.0)


def test_amp_rules() -> None:
    fp16 = {"device": "cuda", "dtype": "float16", "enabled": True, "entries": 10}
    rec = record(config={"autocast": [fp16], "optimizer_steps": 10})
    assert ids(rec) == ["fp16-without-grad-scaler"]
    scaler = [{"device": "cuda", "enabled": True}]
    assert (
        ids(record(config={"autocast": [fp16], "grad_scalers": scaler, "optimizer_steps": 3})) == []
    )
    bf16 = {**fp16, "dtype": "bfloat16"}
    assert ids(record(config={"autocast": [bf16], "grad_scalers": scaler})) == [
        "grad-scaler-with-bf16"
    ]


def _gpu(capability_8: bool = True) -> dict[str, Any]:
    return {
        "device": {"name": "NVIDIA A100", "bf16_tensor_cores": capability_8},
        "memory": {"peak_reserved_bytes": 0},
    }


def test_fp32_gemm_heavy_on_bf16_gpu_and_tf32_off() -> None:
    ops = {"gemm_share": 0.6, "gemm_share_basis": "device"}
    rec = record(gpu=_gpu(), ops=ops, config={"backend_flags": {"tf32_matmul": False}})
    assert sorted(ids(rec)) == ["fp32-on-bf16-gpu", "tf32-off"]
    f = run_findings(rec)[0]
    assert f.saving_ms_per_step == pytest.approx(0.6 * 20 * 0.5)
    tf32_on = record(gpu=_gpu(), ops=ops, config={"backend_flags": {"tf32_matmul": True}})
    assert ids(tf32_on) == ["fp32-on-bf16-gpu"]
    assert ids(record(gpu=_gpu(False), ops=ops)) == []  # V100: no bf16 tensor cores


def test_data_parallel() -> None:
    (f,) = run_findings(record(config={"data_parallel": [{"device_ids": [0, 1]}]}))
    assert f.id == "data-parallel" and f.severity == "warning" and "torchrun" in f.fix


def test_fragmentation() -> None:
    gib = 2**30
    mem = {
        "peak_reserved_bytes": 40 * gib,
        "peak_allocated_bytes": 20 * gib,
        "fragmentation": 0.5,
        "alloc_retries": 3,
        "total_bytes": 80 * gib,
    }
    (f,) = run_findings(record(gpu={"memory": mem}))
    assert f.id == "memory-fragmentation" and f.severity == "warning"
    assert "expandable_segments" in f.fix
    calm = {**mem, "peak_reserved_bytes": 21 * gib, "fragmentation": 0.05, "alloc_retries": 0}
    assert ids(record(gpu={"memory": calm})) == []


def test_out_of_memory_explains_what_filled_it() -> None:
    gib = 2**30
    oom = {"tried_bytes": 2 * gib, "allocated_bytes": 70 * gib, "reserved_unallocated_bytes": gib}
    opt = {"class": "AdamW", "param_bytes": 4 * gib, "impl": "fused"}
    (f,) = run_findings(record(oom=oom, config={"optimizers": [opt]}))
    assert f.id == "out-of-memory" and f.severity == "critical"
    assert "16.00 GiB" in f.title and "54.00 GiB" in f.title  # 4x params for Adam, the rest


def test_tiny_ops_on_cpu() -> None:
    ops = {
        "gemm_share_basis": "cpu",
        "top_level_ops_per_step": 1200,
        "median_op_us": 1.5,
        "op_time_ms_per_step": 4.0,
        "tiny_op_time_ms_per_step": 3.0,
        "tiny_op_threshold_us": 20.0,
    }
    loop = {"class": "Adam", "impl": "for-loop"}
    (f,) = run_findings(record(ops=ops, config={"optimizers": [loop]}))
    # 70% of (3 ms tiny ops + 16 ms of Python between ops), capped by the 20 ms step
    assert f.id == "host-bound" and f.saving_ms_per_step == pytest.approx(0.7 * 19.0)
    assert "foreach=True" in f.fix  # a CPU run, its intra-op threads not recorded: not fused
    big = {**ops, "top_level_ops_per_step": 40, "median_op_us": 300.0}
    assert ids(record(ops=big)) == []


def test_tiny_ops_left_in_a_compiled_cpu_step_are_for_the_record() -> None:
    """compiled_tiny_ops.py after its fused-optimizer line was pasted: compiled, no for-loop
    optimizer, no graph break, no GPU. The compiled graph's own calls are what is left; the
    only advice (a larger batch) keeps them in the step, so host-bound says what is left, as
    info with no per-step saving, and prints neither compile nor the optimizer line again."""
    ops = {
        "gemm_share_basis": "cpu",
        "top_level_ops_per_step": 249,
        "median_op_us": 1.3,
        "op_time_ms_per_step": 4.0,
        "tiny_op_time_ms_per_step": 3.0,
        "tiny_op_threshold_us": 20.0,
    }
    compiled = {"compiles": 1, "compile_s": 0.01, "compile_calls": [{}]}
    fused = {"class": "Adam", "impl": "fused"}
    found = run_findings(record(ops=ops, compile=compiled, config={"optimizers": [fused]}))
    (f,) = [f for f in found if f.id == "host-bound"]
    assert f.severity == "info" and f.saving_ms_per_step == 0.0
    assert f.title.startswith("Already compiled, no for-loop optimizer: 249 operators per step")
    assert "torch.compile(model" not in f.fix and "fused=True" not in f.fix
    assert "larger batch" in f.fix
    # before the paste (a for-loop Adam) the same compiled step names the optimizer line, with
    # the saving its severity is graded on
    loop = {"class": "Adam", "impl": "for-loop"}
    found = run_findings(record(ops=ops, compile=compiled, config={"optimizers": [loop]}))
    (f,) = [f for f in found if f.id == "host-bound"]
    assert "foreach=True" in f.fix and f.severity == "critical"
    assert f.saving_ms_per_step == pytest.approx(0.7 * 19.0)


def test_no_steps_means_no_saving_but_config_findings_remain() -> None:
    rec = record(steps={"count": 0, "measured_steps": 0, "mean_step_ms": None, "step_ms": []})
    rec["config"]["data_parallel"] = [{"device_ids": [0]}]
    (f,) = run_findings(rec)
    assert f.saving_ms_per_step == 0.0 and f.share_of_step == 0.0


def test_every_rule_is_registered() -> None:
    names = {r.__name__ for r in run_rules.RULES}
    assert "tiny_ops" in names
    families = {r.spec.id for r in RUN_FAMILY_RULES}
    assert {"recompiles", "graph-breaks", "host-syncs-in-step", "out-of-memory"} <= families
