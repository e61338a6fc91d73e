"""Peaks per precision mode and floors that hold: the fusion floor (counted FLOPs, compulsory
traffic) under the eager traffic floor, checked on the H200 nanoGPT runs (../shared/traces/h200/
runs), whose compiled GPT-2 step measured 15.4-16.6 ms."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import TRACES
from torchdoctor import roofline
from torchdoctor.commands.check.report_doc import finding_from_dict
from torchdoctor.record.floors import step_floors
from torchdoctor.record.rows import Optimizer
from torchdoctor.record.run import RunRecord
from torchdoctor.report.account_text import roofline_line
from torchdoctor.rules.account_rules import step_account

RUNS = TRACES / "h200" / "runs"
COMPILED_GPT2_STEP_MS = 15.4  # the fastest plain step of nanoGPT --compile=True, GPT-2 shape
GPT2_FLOPS = 7889240457216.0  # counted bf16 FLOPs per step (run.json roofline.work)
GPT2_PARAM_BYTES = 343160832.0  # AdamW over 85,790,208 fp32 parameters (run.json config)


def _run(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    folder = RUNS / name
    if not (folder / "run.json").is_file():
        pytest.skip(f"recorded run {folder} not found (set TORCHDOCTOR_TRACES)")
    return (
        json.loads((folder / "run.json").read_text()),
        json.loads((folder / "report.json").read_text()),
    )


@pytest.mark.parametrize(
    ("tf32", "fp32_tflops", "mode"),
    [(False, 66.9 * 0.8, "cuda-cores"), (True, 494.7 * 0.8, "tf32")],
)
def test_fp32_rate_follows_the_tf32_state(tf32: bool, fp32_tflops: float, mode: str) -> None:
    att = roofline.attainable_gpu("NVIDIA H200", tf32=tf32)
    assert att is not None
    assert att.flops_for("fp32") == pytest.approx(fp32_tflops * 1e12)
    assert att.flops_for("bf16") == pytest.approx(989.4 * 0.8 * 1e12)
    assert att.fp32_mode == mode
    assert roofline.Attainable.from_dict(att.to_dict()).fp32_mode == mode


def test_a_record_without_the_mode_reads_it_from_the_rates() -> None:
    rates = {"fp32": 395.76e12, "tf32": 395.76e12, "bf16": 791.52e12}
    assert roofline.Attainable("H200 SXM", rates).fp32_mode == "tf32"
    rates["fp32"] = 53.52e12
    assert roofline.Attainable("H200 SXM", rates).fp32_mode == "cuda-cores"


@pytest.mark.parametrize(
    ("cls", "per_param"),
    [("AdamW", 9), ("SGD", 5), ("Adagrad", 7), ("MyOptimizer", 5)],  # 5 + 2 x state tensors
)
def test_compulsory_bytes_count_parameters_gradients_and_state(cls: str, per_param: int) -> None:
    nbytes, what = roofline.compulsory_bytes([Optimizer(class_name=cls, param_bytes=1000)])
    assert nbytes == per_param * 1000
    assert what.startswith("parameters, gradients")


def test_the_fusion_floor_is_the_longer_of_compute_and_compulsory_traffic() -> None:
    att = roofline.Attainable("x", {"bf16": 1e12, "fp32": 1e11}, bytes_per_s=1e9)
    f = roofline.fusion_floor({"bf16": 2e9, "fp32": 1e9}, 1e6, att)
    assert (f.compute_ms, f.traffic_ms, f.floor_ms) == pytest.approx((12.0, 1.0, 12.0))
    g = roofline.fusion_floor({"bf16": 2e9}, 5e7, att)
    assert g.floor_ms == pytest.approx(50.0)


def test_gpt2_eager_floors_hold_under_the_compiled_step() -> None:
    record, report = _run("nanogpt_gpt2_eager")
    floors = step_floors(RunRecord.from_dict(record))
    assert floors is not None and floors.fusion is not None
    compute_ms = GPT2_FLOPS / (989.4e12 * 0.8) * 1e3
    assert floors.fusion.floor_ms == pytest.approx(compute_ms)
    assert floors.fusion.compulsory_bytes == 9 * GPT2_PARAM_BYTES
    assert floors.fusion.floor_ms < COMPILED_GPT2_STEP_MS < floors.eager_traffic_ms  # type: ignore[operator]
    assert floors.fusion_gain_ms == pytest.approx(17.503705 - compute_ms)
    step_s = record["roofline"]["efficiency"]["step_ms"] / 1e3
    assert floors.mfu == pytest.approx(GPT2_FLOPS / step_s / 989.4e12)

    findings = [finding_from_dict(d) for d in report["findings"]]
    account = step_account(record, findings)
    assert account is not None
    assert account.floor == "fusion floor"
    assert account.roofline_ms is not None and account.roofline_ms <= COMPILED_GPT2_STEP_MS
    assert account.eager_traffic_ms == pytest.approx(17.503705)
    line = roofline_line(RunRecord.from_dict(record), report.get("account"))
    assert f"fusion floor {compute_ms:.2f} ms" in line
    assert "eager traffic floor 17.50 ms" in line
    assert "its roofline 17.50" not in line
    assert "fp32 (TF32 on" in line  # nanoGPT sets allow_tf32


def test_compiled_runs_have_no_counted_floor() -> None:
    record, _ = _run("nanogpt_gpt2_compiled")
    run = RunRecord.from_dict(record)
    assert step_floors(run) is None
    assert "roofline: not available" in roofline_line(run, None)


def test_an_fp32_run_with_tf32_off_is_judged_at_the_cuda_core_peak() -> None:
    att = roofline.attainable_gpu("NVIDIA H200", tf32=False)
    assert att is not None
    flops = 3e12  # a planted fp32 matmul step: 3 TFLOP in 60 ms
    eff = roofline.efficiency(60.0, [flops], [1e9], ["fp32"], att)
    record = {
        "roofline": {
            "work": {
                "flops_per_step": flops,
                "bytes_per_step": 1e9,
                "by_dtype": {"fp32": {"flops": flops, "bytes": 1e9}},
            },
            "attainable": att.to_dict(),
            "efficiency": eff.to_dict(),
        },
        "config": {"optimizers": []},
    }
    floors = step_floors(RunRecord.from_dict(record))
    assert floors is not None and floors.fusion is not None
    assert floors.fusion.floor_ms == pytest.approx(flops / (66.9e12 * 0.8) * 1e3)
    assert floors.mfu_dtype == "fp32" and floors.mfu_peak_tflops == 66.9
    line = roofline_line(RunRecord.from_dict(record), None)
    assert "53.5 TFLOP/s fp32 (CUDA cores, TF32 off)" in line
