"""Kernel analysis: top kernels, categories and tensor-core use, checked against raw JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.analysis.rawjson import GPU_CATS, KERNEL_CATS, events, per_name
from tests.analysis.synth import A100, EVERYTHING, V100, kernel, launch, make_table, op, steps_of
from torchdoctor.analysis.kernels import analyze_kernels
from torchdoctor.trace.steps import find_steps

BRUTE = ["v100_resnet50_train_workers0", "a100_ddp_convnet_nccl", "h100_vit_classifier_infer"]


@pytest.mark.slow
@pytest.mark.parametrize("stem", BRUTE)
def test_top_kernels_match_raw_json(stem: str, corpus: Any, raw: Any) -> None:
    stats = analyze_kernels(corpus(stem), EVERYTHING, top_n=10)
    gpu = events(raw(stem), GPU_CATS)
    expected = per_name(gpu)
    total_us = sum(e["dur"] for e in gpu)
    assert stats.activity_count == len(gpu)
    assert stats.kernel_count == len(events(raw(stem), KERNEL_CATS))
    assert stats.gpu_time_ms == pytest.approx(total_us / 1e3, rel=1e-12)
    top = sorted(expected.values(), key=lambda v: -v[1])[:10]
    assert [r.total_ms for r in stats.top_kernels] == pytest.approx([v[1] / 1e3 for v in top])
    for row in stats.top_kernels:
        count, dur_us = expected[row.name]
        assert row.count == count
        assert row.total_ms == pytest.approx(dur_us / 1e3, rel=1e-12)
        assert row.mean_us == pytest.approx(dur_us / count, rel=1e-12)
        assert row.share_of_gpu_time == pytest.approx(dur_us / total_us, rel=1e-12)
    assert sum(stats.count_by_category.values()) == len(gpu)
    assert sum(stats.time_by_category_ms.values()) == pytest.approx(total_us / 1e3)


def test_a100_conv_and_gemm_run_in_tf32_on_tensor_cores(corpus: Any, raw: Any) -> None:
    stem = "a100_ddp_convnet_nccl"
    stats = analyze_kernels(corpus(stem), EVERYTHING)
    # this trace's tensor-core families: CUTLASS s1688 (TF32), cuDNN xmma, CUTLASS tfloat32_t
    tc_us = sum(
        e["dur"]
        for e in events(raw(stem), KERNEL_CATS)
        if any(m in e["name"] for m in ("s1688", "xmma", "tfloat32"))
    )
    assert stats.tensor_core_ms == pytest.approx(tc_us / 1e3, rel=1e-12)
    assert stats.matmul_ms_by_dtype["tf32"] == pytest.approx(tc_us / 1e3, rel=1e-12)
    assert stats.tensor_core_share == pytest.approx(tc_us / 1e3 / stats.matmul_ms)
    assert stats.tensor_core_share > 0.9
    assert stats.gpu.compute_capability == (8, 0)


@pytest.mark.parametrize("stem", ["v100_resnet50_train_workers0", "v100_resnet50_train_workers4"])
def test_v100_fp32_convnet_is_off_tensor_cores(stem: str, corpus: Any) -> None:
    table = corpus(stem)
    stats = analyze_kernels(table, find_steps(table))
    assert stats.gpu.has_tensor_cores is True
    assert stats.gpu.compute_capability == (7, 0)
    assert stats.tensor_core_ms == 0.0
    assert stats.fp32_off_tensor_core_ms / stats.matmul_ms > 0.99
    assert stats.time_by_category_ms["convolution"] > stats.time_by_category_ms["gemm"]


def test_h100_bf16_matmuls_on_tensor_cores(corpus: Any, raw: Any) -> None:
    stem = "h100_vit_classifier_infer"
    stats = analyze_kernels(corpus(stem), EVERYTHING)
    mm_us = sum(
        e["dur"]
        for e in events(raw(stem), KERNEL_CATS)
        if ("gemm" in e["name"] or "fprop" in e["name"])
    )
    assert stats.matmul_ms_by_dtype == {"bf16": pytest.approx(mm_us / 1e3, rel=1e-12)}
    assert stats.tensor_core_share == 1.0


@pytest.mark.slow
def test_nccl_time_is_communication(corpus: Any, raw: Any) -> None:
    stem = "v100_ddp_compiled_rank1"
    stats = analyze_kernels(corpus(stem), EVERYTHING)
    nccl_us = sum(e["dur"] for e in events(raw(stem), KERNEL_CATS) if "nccl" in e["name"])
    assert stats.time_by_category_ms["communication"] == pytest.approx(nccl_us / 1e3, rel=1e-12)
    assert stats.tensor_core_ms == 0.0  # fp32 volta_sgemm under torch.compile


def test_rocm_tensile_gemms(corpus: Any) -> None:
    stats = analyze_kernels(corpus("mi250_toy_train_rocm"), EVERYTHING, top_n=100)
    cijk = [r for r in stats.top_kernels if r.name.startswith("Cijk_")]
    assert len(cijk) == 2
    assert all((r.category, r.tensor_core, r.dtype) == ("gemm", True, "fp32") for r in cijk)
    assert stats.gpu.has_tensor_cores is True


def test_cpu_only_trace_has_no_kernels(corpus: Any) -> None:
    table = corpus("cpu_only_rank34")
    stats = analyze_kernels(table, find_steps(table))
    assert (stats.activity_count, stats.gpu_time_ms, stats.top_kernels) == (0, 0.0, ())
    assert stats.tensor_core_share is None
    assert stats.gpu.has_tensor_cores is None
    json.dumps(stats.to_dict())


def _silent_gemm_table(dtype: str, device: dict[str, Any]) -> Any:
    """One GEMM kernel whose name says nothing about dtype, launched by aten::mm."""
    events = [
        op("aten::mm", 0, 20, ext_id=5),
        launch(2, 4, corr=9, ext_id=5),
        kernel("my_gemm_kernel", 10, 30, corr=9),
    ]
    raw = json.dumps([dtype, dtype]).encode()
    return make_table(events, devices=[device], input_types={5: raw})


@pytest.mark.parametrize(
    ("dtype", "device", "expected_dtype", "tensor_core"),
    [
        ("c10::BFloat16", A100, "bf16", True),
        ("float", V100, "fp32", False),  # no TF32 before Ampere
        ("float", A100, "fp32", None),  # fp32 or TF32: the name does not say
    ],
)
def test_dtype_falls_back_to_the_launching_operator(
    dtype: str, device: dict[str, Any], expected_dtype: str, tensor_core: bool | None
) -> None:
    stats = analyze_kernels(_silent_gemm_table(dtype, device), steps_of((0, 100)))
    (row,) = stats.top_kernels
    assert (row.category, row.dtype, row.tensor_core) == ("gemm", expected_dtype, tensor_core)
    assert stats.matmul_ms_by_dtype == {expected_dtype: 0.03}
    expected_tc = 0.03 if tensor_core else 0.0
    assert stats.tensor_core_ms == expected_tc


def test_zero_length_and_unlaunched_kernels() -> None:
    table = make_table(
        [kernel("volta_sgemm_128x64_nn", 5, 0.0), kernel("volta_sgemm_128x64_nn", 6, 0.0)],
        devices=[V100],
    )
    stats = analyze_kernels(table, steps_of((0, 10)))
    (row,) = stats.top_kernels
    assert (row.count, row.total_ms, row.mean_us, row.share_of_gpu_time) == (2, 0.0, 0.0, 0.0)
    assert stats.tensor_core_share is None  # no GEMM time at all


def test_window_excludes_kernels_outside_the_steps() -> None:
    table = make_table([kernel("a", 5, 1.0), kernel("b", 15, 2.0), kernel("c", 25, 4.0)])
    stats = analyze_kernels(table, steps_of((0, 10), (10, 20)))
    assert [r.name for r in stats.top_kernels] == ["b", "a"]
    assert stats.gpu_time_ms == pytest.approx(0.003)
    assert stats.gpu.name is None
