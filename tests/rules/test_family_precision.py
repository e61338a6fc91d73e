"""The precision family (``rules/families/precision.py``): autocast and GradScaler that do not
fit each other, fp32 matmuls on a bf16 GPU and TF32 left off, from hand-written check records."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rules.run_records import fire, record, with_threshold
from torchdoctor.rules.families import precision as pr

FP16, BF16, FP32, TF32 = pr.RULES


def amp(dtypes: list[str], scaler: bool | None, steps: int = 5) -> dict[str, Any]:
    config: dict[str, Any] = {
        "autocast": [{"dtype": d, "enabled": True} for d in dtypes],
        "optimizer_steps": steps,
    }
    if scaler is not None:
        config["grad_scalers"] = [{"enabled": scaler}]
    return record(config=config)


def test_fp16_without_a_scaler_is_a_risk_at_no_saving() -> None:
    f = fire(FP16, amp(["float16"], scaler=None))
    assert f is not None and f.id == "fp16-without-grad-scaler"
    assert f.severity == "warning" and f.saving_ms_per_step == 0.0  # a risk keeps its warning
    assert f.evidence["autocast_dtypes"] == ["float16"] and "GradScaler" in f.fix
    assert fire(FP16, amp(["float16"], scaler=True)) is None  # scaled
    assert fire(FP16, amp(["float16"], scaler=None, steps=0)) is None  # inference: no gradients


def test_a_scaler_beside_bf16_is_for_the_record() -> None:
    f = fire(BF16, amp(["bfloat16"], scaler=True))
    assert f is not None and f.severity == "info" and f.saving_ms_per_step == 0.0
    assert fire(BF16, amp(["bfloat16", "float16"], scaler=True)) is None  # fp16 needs it
    assert fire(BF16, amp(["bfloat16"], scaler=False)) is None  # built disabled


def gpu_run(gemm: float, tf32: bool = False, autocast: list[str] | None = None) -> dict:
    rec = record(
        step_ms=40.0,
        gpu={"device": {"name": "NVIDIA H200", "bf16_tensor_cores": True}},
        ops={"gemm_share": gemm, "gemm_share_basis": "device"},
        config={
            "backend_flags": {"tf32_matmul": tf32},
            "autocast": [{"dtype": d, "enabled": True} for d in autocast or []],
        },
    )
    return rec


def test_fp32_gemms_on_a_bf16_gpu_save_half_their_share() -> None:
    f = fire(FP32, gpu_run(gemm=0.6))
    assert f is not None
    assert f.title == "fp32 training on NVIDIA H200 (bf16 tensor cores): GEMMs are 60% of GPU time"
    # GEMM_SPEEDUP_SAVING (half) of 60% of the 40 ms step
    assert f.saving_ms_per_step == pytest.approx(12.0) and f.severity == "critical"
    t = fire(TF32, gpu_run(gemm=0.6))
    assert t is not None and t.saving_ms_per_step == pytest.approx(12.0)
    assert "allow_tf32 = True" in t.fix


def test_few_gemms_autocast_or_tf32_on_are_quiet() -> None:
    few = gpu_run(gemm=0.1)
    assert fire(FP32, few) is None and fire(TF32, few) is None  # under GEMM_MIN_SHARE
    assert fire(with_threshold(FP32, 0.05), few) is not None  # the spec's threshold decides
    assert fire(FP32, gpu_run(gemm=0.6, autocast=["bfloat16"])) is None
    on = gpu_run(gemm=0.6, tf32=True)
    assert fire(FP32, on) is not None and fire(TF32, on) is None
