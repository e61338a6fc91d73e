"""Fixes built from the user's own code, tested on hand-written run records: the DataLoader
call as written, the guard's tensor and dimension, the next step for a compiled model, and
compute-heavy or checkpointed steps that are not framework overhead."""

from __future__ import annotations

from typing import Any

from torchdoctor.capture.compile_watch import guard_dims
from torchdoctor.rules.run_rules import run_findings

SITE = "/home/u/proj/train.py:41"


def record(**parts: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "exit": {"status": "stopped", "code": 0},
        "steps": {"count": 8, "measured_steps": 3, "mean_step_ms": 100.0},
        "config": {},
    }
    for key, value in parts.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return base


def loader(**extra: Any) -> dict[str, Any]:
    raw = {
        "num_workers": 0,
        "pin_memory": False,
        "persistent_workers": False,
        "prefetch_factor": None,
        "batch_size": 32,
        "cpus_per_rank": 4,
        "explicit": {"batch_size": "32", "shuffle": "True", "collate_fn": "pad_batch"},
        "call": {
            "site": SITE,
            "func": "data.DataLoader",
            "args": ["train_set", "32"],
            "kwargs": {
                "shuffle": "True",
                "collate_fn": "pad_batch",
                "sampler": "None",
                "drop_last": "True",
            },
        },
    }
    return {**raw, **extra}


def only(findings: list[Any], fid: str) -> Any:
    hits = [f for f in findings if f.id == fid]
    assert len(hits) == 1, [f.id for f in findings]
    return hits[0]


def test_dataloader_fix_rewrites_the_users_call_keeping_every_argument() -> None:
    run = record(steps={"mean_data_wait_ms": 40.0}, config={"dataloaders": [loader()]})
    fix = only(run_findings(run), "dataloader-config").fix
    assert fix.startswith("data.DataLoader(train_set, batch_size=32, shuffle=True, ")
    for kept in ("collate_fn=pad_batch", "sampler=None", "drop_last=True"):
        assert kept in fix
    # 40 ms per batch made in the training process, 60 ms of compute: two workers suffice
    assert "num_workers=2" in fix and "persistent_workers=True" in fix
    assert fix.count("batch_size") == 1 and f"# at {SITE}" in fix


def test_dataloader_fix_never_suggests_a_value_already_set() -> None:
    dl = loader(num_workers=1, persistent_workers=True, prefetch_factor=6)
    dl["explicit"] = {**dl["explicit"], "prefetch_factor": "6", "persistent_workers": "True"}
    dl["call"]["kwargs"].update(num_workers="1", persistent_workers="True", prefetch_factor="6")
    run = record(steps={"mean_data_wait_ms": 40.0}, config={"dataloaders": [dl]})
    fix = only(run_findings(run), "dataloader-config").fix
    assert "num_workers=4" in fix and "num_workers=1" not in fix  # replaced in place
    assert fix.count("persistent_workers=True") == 1 and "prefetch_factor=6" in fix
    assert "prefetch_factor=4" not in fix


def test_workers_at_the_cpu_count_say_so_and_name_the_item_cost() -> None:
    dl = loader(num_workers=4, persistent_workers=True, prefetch_factor=4, cpus_per_rank=4)
    run = record(steps={"mean_data_wait_ms": 30.0}, config={"dataloaders": [dl]})
    f = only(run_findings(run), "dataloader-config")
    assert "already uses this rank's 4 CPUs" in f.fix
    # 100 ms steps x 4 busy workers / 32 items per batch
    assert "about 12.50 ms per item" in f.fix
    assert "DataLoader(" not in f.fix  # nothing left to change in the call
    assert f.evidence["item_ms_estimate"] == 12.5


def test_pin_memory_alone_on_a_cuda_run_keeps_the_call() -> None:
    gpu = {"device": {"name": "H100"}, "memory": {}}
    run = record(steps={"mean_data_wait_ms": 0.0}, config={"dataloaders": [loader()]}, gpu=gpu)
    fix = only(run_findings(run), "dataloader-config").fix
    assert "collate_fn=pad_batch" in fix and "pin_memory=True" in fix
    assert "num_workers" not in fix  # no data wait: only the missing pin


def recompiling(reason: str) -> dict[str, Any]:
    events = [
        {
            "compile_id": "0/1",
            "function": "forward",
            "site": "/p/m.py:19",
            "reason": reason,
            "seconds": 0.5,
            "changed_dims": guard_dims(reason),
        }
    ]
    return record(
        compile={
            "compiles": 2,
            "recompiles": 1,
            "recompile_s": 0.5,
            "recompiles_in_window": 1,
            "recompile_s_in_window": 0.5,
            "recompile_events": events,
        }
    )


def test_recompile_fix_names_the_changed_dimension() -> None:
    run = recompiling("0/0: tensor 'idx' size mismatch at index 1. expected 58, actual 28")
    fix = only(run_findings(run), "recompiles").fix
    assert fix.startswith("torch._dynamo.mark_dynamic(idx, 1)")
    assert "58, 28" in fix and "mark_dynamic(x, 0)" not in fix


def test_guard_names_are_read_as_the_users_expressions() -> None:
    dims = guard_dims(
        "tensor 'L['batch']['input_ids']' size mismatch at index 1. expected 128, actual 96"
    )
    assert dims == [
        {
            "tensor": "L['batch']['input_ids']",
            "kind": "size",
            "dim": 1,
            "expected": 128,
            "actual": 96,
        }
    ]
    run = recompiling(
        "tensor 'L['batch']['input_ids']' size mismatch at index 1. expected 128, actual 96"
    )
    assert "mark_dynamic(batch['input_ids'], 1)" in only(run_findings(run), "recompiles").fix


def test_guard_on_a_value_keeps_the_general_advice() -> None:
    run = recompiling("1/0: ___stack0 == 0.5047433972358704")
    fix = only(run_findings(run), "recompiles").fix
    assert "mark_dynamic" not in fix and "constant" in fix


TINY_OPS = {
    "top_level_ops_per_step": 900,
    "median_op_us": 3.0,
    "op_time_ms_per_step": 20.0,
    "tiny_op_time_ms_per_step": 15.0,
    "tiny_op_threshold_us": 20.0,
    "gemm_share": 0.05,
    "gemm_share_basis": "cpu",
}
LOOP_ADAM = [{"class": "Adam", "impl": "for-loop"}]


def test_compiled_model_is_never_told_to_compile() -> None:
    compiled = {"compiles": 1, "compile_calls": [{"mode": None, "backend": "inductor"}]}
    run = record(ops=TINY_OPS, compile=compiled, config={"optimizers": LOOP_ADAM})
    fix = only(run_findings(run), "host-bound").fix
    # a CPU run with its intra-op threads unrecorded is told foreach, not fused
    assert "torch.compile(model)" not in fix and "Adam(params, ..., foreach=True)" in fix
    eager = record(ops=TINY_OPS, config={"optimizers": LOOP_ADAM})
    assert "torch.compile(model)" in only(run_findings(eager), "host-bound").fix


def test_compiled_model_on_a_gpu_gets_cuda_graphs_or_graph_breaks_first() -> None:
    from torchdoctor.record.rows import CompileCall
    from torchdoctor.rules.user_fixes import compiled_next_step

    fix = compiled_next_step([CompileCall()], 0, True, [])
    assert 'mode="reduce-overhead"' in fix
    tuned = [CompileCall(mode="reduce-overhead")]
    assert "reduce-overhead" not in compiled_next_step(tuned, 0, True, [])
    assert compiled_next_step([CompileCall()], 2, True, []).startswith("# the model is compiled")


def test_gemm_heavy_step_is_not_framework_overhead() -> None:
    heavy = record(ops={**TINY_OPS, "gemm_share": 0.8})
    assert not [f for f in run_findings(heavy) if f.id == "host-bound"]
    assert [f for f in run_findings(record(ops=TINY_OPS)) if f.id == "host-bound"]


def test_checkpointing_names_the_recomputation_cost() -> None:
    ck = {"calls_total": 20, "calls_measured": 12, "forward_s_measured": 0.09}
    run = record(ops={**TINY_OPS, "gemm_share": 0.8}, config={"checkpointing": ck})
    f = only(run_findings(run), "activation-recompute")
    assert f.saving_ms_per_step == 30.0 and f.share_of_step == 0.3  # 90 ms / 3 steps of 100
    assert "recomputes 30.0 ms of forward per step" in f.title and f.severity == "critical"
