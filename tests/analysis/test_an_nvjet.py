"""cuBLASLt's nvjet GEMMs (Hopper and later): the type group after ``nvjet_[smNN_]`` spells the
input dtype (t bf16, h fp16, s fp32, q fp8; ``_tf32`` marks TF32), and half or narrower inputs run
on tensor cores. Plain fp32 leaves tensor-core use open: the run's TF32 state decides, else it
stays unknown (counted against the tensor-core share, never called "off")."""

from __future__ import annotations

import json

import pytest

from tests.analysis.synth import kernel, launch, make_table, op, steps_of
from torchdoctor.analysis.kernel_names import classify_kernel
from torchdoctor.analysis.kernels import KernelContext, analyze_kernels

H100 = {
    "id": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "computeMajor": 9,
    "computeMinor": 0,
    "totalGlobalMem": 80 * 2**30,
}


@pytest.mark.parametrize(
    ("name", "tensor_core", "dtype"),
    [
        ("nvjet_sss_tf32_128x256_TNT", True, "tf32"),  # TF32 spelled in the name
        ("nvjet_hsh_192x192_64x3_2x1_v_bz_coopB_NTN", True, "fp16"),
        ("nvjet_sm90_hss_320x128_64x3_2x1_v_bz_coopA_NNT", True, "fp16"),
        ("nvjet_sss_128x128_64x4_2x1_v_bz_NNT", None, "fp32"),  # fp32: the name cannot say "no"
        ("nvjet_tst_128x8_64x12_2x1_v_bz_splitK_TNT", True, "bf16"),  # seen with bf16 I/O
        ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", True, "bf16"),  # H200, bf16 autocast
        ("nvjet_sm90_hsh_320x128_64x3_1x2_h_bz_coopB_NTT", True, "fp16"),  # H200, fp16 autocast
        ("nvjet_sm100_qqtst_128x256_128x6_2x1_2cta_v_bz_bias_TNT", True, "fp8"),  # B200, fp8
        ("nvjet_sm120_tst_mma_64x64x128_3_32x32x128_tmaAB_alignCD4_bz_TNNN", True, "bf16"),
    ],
)
def test_nvjet_names_decide_only_where_they_spell_the_math(
    name: str, tensor_core: bool | None, dtype: str
) -> None:
    info = classify_kernel(name)
    assert (info.category, info.tensor_core, info.dtype) == ("gemm", tensor_core, dtype)


def _nvjet_table(input_dtype: str | None, kernel_name: str) -> object:
    events = [
        op("aten::mm", 0, 20, ext_id=5),
        launch(2, 4, corr=9, ext_id=5),
        kernel(kernel_name, 10, 30, corr=9),
    ]
    types = {5: json.dumps([input_dtype, input_dtype]).encode()} if input_dtype else None
    return make_table(events, devices=[H100], input_types=types)


_SSS = "nvjet_sss_128x128_64x4_2x1_v_bz_NNT"


@pytest.mark.parametrize(
    ("kernel_name", "input_dtype", "context", "dtype", "tensor_core", "tc_ms"),
    [
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopB_TNN", None, None, "bf16", True, 0.03),
        (_SSS, "float", None, "fp32", None, 0.0),  # TF32 state not recorded: open
        (_SSS, "float", KernelContext(tf32_matmul=False), "fp32", False, 0.0),
        (_SSS, "float", KernelContext(tf32_matmul=True), "tf32", True, 0.03),
        ("triton_tem_fused_mm_0", None, None, "unknown", None, 0.0),
        ("triton_tem_fused_mm_0", None, KernelContext(autocast_dtype="bf16"), "bf16", True, 0.03),
        (
            "triton_tem_fused_mm_0",
            "c10::Half",
            KernelContext(autocast_dtype="bf16"),
            "fp16",
            True,
            0.03,
        ),
    ],
)
def test_open_names_follow_the_operator_and_the_run(
    kernel_name: str,
    input_dtype: str | None,
    context: KernelContext | None,
    dtype: str,
    tensor_core: bool | None,
    tc_ms: float,
) -> None:
    table = _nvjet_table(input_dtype, kernel_name)
    stats = analyze_kernels(table, steps_of((0, 100)), context=context)  # type: ignore[arg-type]
    (row,) = stats.top_kernels
    assert (row.dtype, row.tensor_core) == (dtype, tensor_core)
    assert stats.tensor_core_ms == tc_ms


def test_autocast_is_not_claimed_for_kernels_of_other_operators() -> None:
    events = [
        op("aten::add", 0, 20, ext_id=5),
        launch(2, 4, corr=9, ext_id=5),
        kernel("triton_tem_fused_mm_0", 10, 30, corr=9),
    ]
    table = make_table(events, devices=[H100])
    ctx = KernelContext(autocast_dtype="bf16")
    (row,) = analyze_kernels(table, steps_of((0, 100)), context=ctx).top_kernels  # type: ignore[arg-type]
    assert (row.dtype, row.tensor_core) == ("unknown", None)


def test_an_unrecognised_kernel_of_a_matmul_counts_as_gemm_time_of_unknown_tensor_cores() -> None:
    events = [
        op("aten::mm", 0, 20, ext_id=5),
        launch(2, 4, corr=9, ext_id=5),
        kernel("vendor_opaque_kernel_7", 10, 30, corr=9),
    ]
    stats = analyze_kernels(make_table(events, devices=[H100]), steps_of((0, 100)))  # type: ignore[arg-type]
    (row,) = stats.top_kernels
    assert (row.category, row.tensor_core, row.family, row.classified) == (
        "gemm",
        None,
        "unknown",
        False,
    )
    assert (stats.matmul_ms, stats.unknown_tensor_core_ms, stats.off_tensor_core_ms) == (
        0.03,  # the kernel's 30 us
        0.03,
        0.0,
    )
    assert stats.unclassified_names == 1
