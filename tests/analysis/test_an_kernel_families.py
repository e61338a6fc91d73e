"""One name grammar per kernel family, pinned on names from real traces: the H200 runs
(../shared/traces/h200), the H100/A100/V100/MI300X corpus, and a few public Blackwell names."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TRACES
from torchdoctor.analysis.bundle import analyze_table
from torchdoctor.analysis.kernel_names import classify_kernel
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.report.kernel_notes import kernel_notes
from torchdoctor.trace.load import load_trace

H200 = TRACES / "h200"

# (name, category, tensor_core, dtype, family)
CASES = [
    # cuDNN's SDPA on an H200 under bf16 autocast: tensor cores; "f16" names no input dtype
    (
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1"
        "_kernel0_0",
        "attention",
        True,
        "unknown",
        "cudnn-sdpa",
    ),
    (
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1"
        "_kernel0_0",
        "attention",
        True,
        "unknown",
        "cudnn-sdpa",
    ),
    (
        "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*, "
        "void*, unsigned int, unsigned int)",
        "reduction",
        None,
        "unknown",
        "cudnn-sdpa",
    ),
    # cuBLAS on Hopper: xmma dtype groups <A B>_<math>_<accumulate>; ffma is CUDA-core fp32
    (
        "sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x256x32_warpgroupsize2x1x1_execute_segment"
        "_k_off_kernel__5x_cublas",
        "gemm",
        True,
        "tf32",
        "xmma",
    ),
    (
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4"
        "_alignc4_execute_kernel__5x_cublas",
        "gemm",
        False,
        "fp32",
        "xmma",
    ),
    (
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16"
        "_stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn",
        "convolution",
        True,
        "tf32",
        "xmma",
    ),
    # CUTLASS 2 and 3: tensorop vs simt
    (
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>("
        "cutlass_80_simt_sgemm_128x256_8x4_nt_align1::Params)",
        "gemm",
        False,
        "fp32",
        "cutlass",
    ),
    (
        "void cutlass::Kernel2<cutlass_75_tensorop_s1688gemm_bf16_128x64_nt_align1>("
        "cutlass_75_tensorop_s1688gemm_bf16_128x64_nt_align1::Params)",
        "gemm",
        True,
        "bf16",
        "cutlass",
    ),
    (
        "cutlass3x_sm100_simt_sgemm_f32_f32_f32_f32_f32_64x64x16_1x1x1_3_tnn_align1_bias_f32_relu",
        "gemm",
        False,
        "fp32",
        "cutlass",
    ),
    (
        "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_warp"
        "specialized_cooperative_epi_tma",
        "gemm",
        True,
        "bf16",
        "cutlass",
    ),
    # FlashAttention 2 and 3, split-KV combine, memory-efficient SDPA
    (
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4,"
        " false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, "
        "cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>("
        "pytorch_flash::Flash_fwd_params)",
        "attention",
        True,
        "bf16",
        "flash-attention",
    ),
    (
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
        "flash::CollectiveMainloopFwdSm90<2, cute::tuple<int, int, int>, cute::tuple<int, int, int>,"
        " cutlass::half_t, float> > > >(flash::FlashAttnFwdSm90::Params)",
        "attention",
        True,
        "fp16",
        "flash-attention",
    ),
    ("flash_fwd_splitkv_combine_kernel", "reduction", None, "unknown", "flash-attention"),
    (
        "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
        "cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
        "attention",
        True,
        "bf16",
        "mem-efficient-attention",
    ),
    (
        "fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<"
        "cutlass::arch::Sm80, float, true, false, true, 64, 64, 64, false>::Params)",
        "attention",
        None,
        "fp32",
        "mem-efficient-attention",
    ),
    # Triton: Inductor pointwise/reduction vs templates (the operator decides the dtype)
    (
        "triton_poi_fused__unsafe_view_gelu_gelu_backward_view_3",
        "elementwise",
        None,
        "unknown",
        "triton",
    ),
    (
        "triton_per_fused__to_copy_add_native_layer_norm_backward_view_5",
        "reduction",
        None,
        "unknown",
        "triton",
    ),
    ("triton_tem_fused_addmm_0", "gemm", None, "unknown", "triton"),
    # triton_kernels' MoE GEMM and its finalize step (vLLM on MI300X)
    (
        "_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1_swiglu",
        "gemm",
        True,
        "bf16",
        "triton-kernels",
    ),
    ("_finalize_matmul_scatter_bf16", "reduction", None, "unknown", "triton-kernels"),
    # vLLM / SGLang on MI300X: a KV-cache write is a copy, not fp8 attention; cache type 0 = auto
    (
        "void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16, __hip_bfloat16, "
        "(vllm::Fp8KVCacheDataType)0>(__hip_bfloat16 const*, __hip_bfloat16 const*, "
        "__hip_bfloat16*, __hip_bfloat16*, long const*, long, long, long, long, long)",
        "elementwise",
        None,
        "unknown",
        "kv-cache-write",
    ),
    (
        "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>("
        "(anonymous namespace)::StoreKVCacheParams)",
        "elementwise",
        None,
        "unknown",
        "kv-cache-write",
    ),
    (
        "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, "
        "(vllm::Fp8KVCacheDataType)0, 1, 128, 256, false, 4, 1, ck_tile::ComposedAttention<0u, "
        "false> >(__hip_bfloat16 const*, __hip_bfloat16 const*, __hip_bfloat16 const*)",
        "attention",
        True,
        "bf16",
        "paged-attention",
    ),
    (
        "void paged_attention_v2_kernel<__nv_bfloat16, __nv_bfloat16, 128, 16, 128, "
        "(vllm::Fp8KVCacheDataType)1, false, 512>(float*, float*, __nv_bfloat16*)",
        "attention",
        None,
        "fp8",
        "paged-attention",
    ),
    # NCCL
    (
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "communication",
        None,
        "unknown",
        "nccl",
    ),
    # nanoGPT's embedding backward on an H200: CUB's sort, ATen's segment reduction
    (
        "void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<at_cuda_detail"
        "::cub::detail::radix::policy_hub<long, at::cuda::cub::detail::OpaqueType<8>, unsigned long"
        " long>::Policy1000, false, long, int>(int*, int*, long*, long const*)",
        "other",
        None,
        "unknown",
        "cub-sort",
    ),
    (
        "void at::native::(anonymous namespace)::krn_partials_per_segment<long>(long*, long const*,"
        " long const*, long)",
        "reduction",
        None,
        "unknown",
        "generic",
    ),
    (
        "at::native::amp_update_scale_cuda_kernel(float*, int*, float const*, double, double, int)",
        "elementwise",
        None,
        "unknown",
        "generic",
    ),
    # names nobody reads: unknown, never "no tensor cores"
    ("at::cuda::(anonymous namespace)::spin_kernel(long)", "other", None, "unknown", "unknown"),
    ("my_custom_matmul_kernel_v2", "gemm", None, "unknown", "generic"),
]


@pytest.mark.parametrize(("name", "category", "tensor_core", "dtype", "family"), CASES)
def test_family_grammar(
    name: str, category: str, tensor_core: bool | None, dtype: str, family: str
) -> None:
    info = classify_kernel(name)
    assert (info.category, info.tensor_core, info.dtype, info.family) == (
        category,
        tensor_core,
        dtype,
        family,
    )


def test_cudnn_sdpa_claims_no_dtype_from_its_name() -> None:
    info = classify_kernel(CASES[0][0])
    assert info.dtype_in_name is False


def _kernels(stem: str) -> object:
    path = H200 / f"{stem}.json.gz"
    if not path.is_file():
        pytest.skip(f"H200 trace {path} not found (set TORCHDOCTOR_TRACES)")
    return analyze_table(load_trace(path)).kernels


def test_gpt2_eager_gemms_are_bf16_on_tensor_cores() -> None:
    k = _kernels("nanogpt_gpt2_eager_check")  # recorded without shapes: the names decide
    assert k.tensor_core_share >= 0.9  # type: ignore[attr-defined]
    assert k.matmul_ms_by_dtype["bf16"] / k.matmul_ms >= 0.9  # type: ignore[attr-defined]
    sdpa = [r for r in k.top_kernels if r.family == "cudnn-sdpa" and r.category == "attention"]  # type: ignore[attr-defined]
    assert len(sdpa) == 2
    assert all(r.tensor_core and r.dtype == "unknown" and not r.dtype_in_name for r in sdpa)
    assert k.peak_tflops_by_dtype == {"bf16": 989.4}  # type: ignore[attr-defined]


def test_planted_fp32_stays_off_tensor_cores_at_the_cuda_core_peak() -> None:
    k = _kernels("planted_fp32_matmul")
    assert k.tensor_core_ms == 0.0  # type: ignore[attr-defined]
    assert k.off_tensor_core_ms == pytest.approx(k.matmul_ms)  # type: ignore[attr-defined]
    assert set(k.matmul_ms_by_dtype) == {"fp32"}  # type: ignore[attr-defined]
    assert k.peak_tflops_by_dtype == {"fp32": 66.9}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("stem", "dtype"),
    [
        ("planted_bf16_matmul", "bf16"),
        ("check_scaler_syncs", "fp16"),
        ("check_tf32_new_api", "tf32"),
        ("nanogpt_gpt2_compiled_check", "bf16"),
    ],
)
def test_h200_gemms_on_tensor_cores(stem: str, dtype: str) -> None:
    k = _kernels(stem)
    assert k.tensor_core_share >= 0.9  # type: ignore[attr-defined]
    assert max(k.matmul_ms_by_dtype, key=k.matmul_ms_by_dtype.get) == dtype  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "stem",
    [
        "nanogpt_gpt2_eager_check",
        "nanogpt_gpt2_compiled_check",
        "nanogpt_char_eager_check",
        "nanogpt_char_compiled_check",
        "planted_fp32_matmul",
        "planted_bf16_matmul",
        "check_scaler_syncs",
        "check_tf32_new_api",
    ],
)
def test_every_kernel_over_one_percent_is_classified(stem: str) -> None:
    k = _kernels(stem)
    big = [r for r in k.top_kernels if r.share_of_gpu_time >= 0.01]  # type: ignore[attr-defined]
    assert big and [r.name for r in big if not r.classified] == []


def _mm_trace(folder: Path) -> Path:
    """A trace whose one GEMM kernel (a Triton template) says no dtype, launched by aten::mm."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 40, "pid": 1, "tid": 1}
        | {"args": {"External id": 5}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 2, "dur": 2}
        | {"pid": 1, "tid": 1, "args": {"External id": 5, "correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "triton_tem_fused_mm_0", "ts": 10, "dur": 500}
        | {"pid": 0, "tid": 7, "args": {"External id": 5, "correlation": 9, "device": 0}},
    ]
    props = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0}]
    path = folder / "trace.json.gz"
    doc = {"traceEvents": events, "deviceProperties": props}
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


@pytest.mark.parametrize(
    ("record", "dtype", "tc"),
    [
        (None, "unknown", None),  # a bare trace: the name and the operator leave it open
        (
            {"config": {"autocast": [{"device": "cuda", "dtype": "bfloat16", "enabled": True}]}},
            "bf16",
            True,
        ),
        ({"config": {"autocast": [], "backend_flags": {"tf32_matmul": False}}}, "unknown", None),
    ],
)
def test_a_check_run_folder_lends_its_autocast_dtype(
    tmp_path: Path, record: dict[str, Any] | None, dtype: str, tc: bool | None
) -> None:
    trace = _mm_trace(tmp_path)
    if record is not None:
        (tmp_path / "run.json").write_text(json.dumps(record))
    report = analyze_path(trace)
    (row,) = report.analysis.kernels.top_kernels  # type: ignore[union-attr]
    assert (row.dtype, row.tensor_core) == (dtype, tc)


def test_kernel_notes_name_the_cuda_core_peak_and_unclaimed_dtypes() -> None:
    fp32 = kernel_notes(_kernels("planted_fp32_matmul"))  # type: ignore[arg-type]
    assert "dense peaks (datasheet): fp32 on CUDA cores 66.9 TFLOP/s" in fp32
    gpt2 = " ".join(kernel_notes(_kernels("nanogpt_gpt2_eager_check")))  # type: ignore[arg-type]
    assert "2 attention kernel(s) on tensor cores whose names carry no input dtype" in gpt2
