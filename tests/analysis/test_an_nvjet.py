"""cuBLASLt's nvjet GEMMs (Hopper and later) are not all tensor-core kernels: the name decides
where it spells the math, else the launching operator's dtype does, else it stays unknown
(counted against the tensor-core share, never for it)."""

from __future__ import annotations

import json

import pytest

from tests.analysis.synth import kernel, launch, make_table, op, steps_of
from torchdoctor.analysis.kernel_names import classify_kernel
from torchdoctor.analysis.kernels import analyze_kernels

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
        ("nvjet_sss_128x128_64x4_2x1_v_bz_NNT", False, "fp32"),  # fp32 math, no TF32 in it
        ("nvjet_tst_128x8_64x12_2x1_v_bz_splitK_TNT", None, "unknown"),  # seen with bf16 I/O
    ],
)
def test_nvjet_names_decide_only_where_they_spell_the_math(
    name: str, tensor_core: bool | None, dtype: str
) -> None:
    info = classify_kernel(name)
    assert (info.category, info.tensor_core, info.dtype) == ("gemm", tensor_core, dtype)


def _nvjet_table(input_dtype: str | None) -> object:
    events = [
        op("aten::mm", 0, 20, ext_id=5),
        launch(2, 4, corr=9, ext_id=5),
        kernel("nvjet_tst_128x256_64x4_1x2_h_bz_coopB_TNN", 10, 30, corr=9),
    ]
    types = {5: json.dumps([input_dtype, input_dtype]).encode()} if input_dtype else None
    return make_table(events, devices=[H100], input_types=types)


@pytest.mark.parametrize(
    ("input_dtype", "dtype", "tensor_core", "tc_ms"),
    [
        ("c10::BFloat16", "bf16", True, 0.03),
        ("float", "fp32", None, 0.0),  # fp32 operands: TF32 or not, the name does not say
        (None, "unknown", None, 0.0),
    ],
)
def test_nvjet_tensor_cores_follow_the_operator_dtype(
    input_dtype: str | None, dtype: str, tensor_core: bool | None, tc_ms: float
) -> None:
    stats = analyze_kernels(_nvjet_table(input_dtype), steps_of((0, 100)))  # type: ignore[arg-type]
    (row,) = stats.top_kernels
    assert (row.dtype, row.tensor_core) == (dtype, tensor_core)
    assert stats.tensor_core_ms == tc_ms
