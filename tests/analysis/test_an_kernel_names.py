"""Kernel-name classification on names taken from real traces (and a few known library names)."""

from __future__ import annotations

import pytest

from torchdoctor.analysis.kernel_names import classify_kernel, input_type_dtype

# (name, category, tensor_core, dtype): names copied from the corpus unless marked
CASES = [
    ("volta_sgemm_128x64_nn", "gemm", False, "fp32"),
    ("ampere_sgemm_32x32_sliced1x4_tn", "gemm", False, "fp32"),
    (
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>("
        "cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4::Params)",
        "gemm",
        True,
        "tf32",
    ),
    (
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>"
        "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8::Params)",
        "gemm",
        True,
        "bf16",
    ),
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute"
        "_segment_k_off_kernel__5x_cublas",
        "gemm",
        True,
        "bf16",
    ),
    (
        "void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>("
        "cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
        "gemm",
        False,
        "fp32",
    ),
    (
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16"
        "_stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn",
        "convolution",
        True,
        "tf32",
    ),
    ("volta_scudnn_128x64_relu_interior_nn_v1", "convolution", False, "fp32"),
    (
        "cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",
        "convolution",
        False,
        "fp32",
    ),
    (
        "void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>("
        "int, int, int, float const*, int, float*, float const*, kernel_conv_params, "
        "unsigned long long, int, float, float, int, float const*, float const*, bool, int, int)",
        "convolution",
        False,
        "fp32",
    ),
    (
        "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, "
        "float const*, int, float const*, int, float*, kernel_grad_params, unsigned long long, "
        "int, unsigned long long, int, float, int, int, int)",
        "convolution",
        False,
        "fp32",
    ),
    (
        "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_"
        "32x4_nhwc_align8>(cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_"
        "align8::Params)",
        "convolution",
        True,
        "bf16",
    ),
    (
        "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11thread"
        "block22ImplicitGemmMultistageINS_4gemm9GemmShapeILi128ELi128ELi32EEENS4_52Conv2dWgrad"
        "OutputGradientTileAccessIteratorOptimizedINS_11MatrixShapeILi128ELi32EEENS_10tfloat32_tE",
        "convolution",
        True,
        "tf32",
    ),
    (
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128,"
        " 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, "
        "4, cutlass::bfloat16_t> >, false, false, false, false, true, true, false, false>("
        "pytorch_flash::Flash_fwd_params)",
        "attention",
        True,  # FlashAttention runs its matmuls on tensor cores on every path
        "bf16",
    ),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "communication", None, "unknown"),
    (
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "communication",
        None,
        "unknown",
    ),  # NCCL >= 2.19 spelling, not in the corpus
    ("triton_poi_fused_add_cos_sin_0", "elementwise", None, "unknown"),
    ("triton_red_fused_native_layer_norm_0", "reduction", None, "unknown"),
    ("triton_per_fused_sum_1", "reduction", None, "unknown"),
    ("triton_tem_fused_mm_0", "gemm", None, "unknown"),
    (
        "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1"
        "_ASEM1_CLR1_CADS0_EPS0_GRVWA2_GRVWB2_GSUAMB_ISA90a_IU1",
        "gemm",
        True,
        "fp32",
    ),
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0", "gemm", True, "fp16"),
    ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0", "gemm", True, "bf16"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopB_TNN", "gemm", True, "bf16"),  # t: bf16 inputs
    ("volta_h884gemm_64x64_ldg8_nn", "gemm", True, "fp16"),
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn", "gemm", True, "fp16"),
    (
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma",
        "gemm",
        False,
        "fp32",
    ),
    (
        "void splitKreduce_kernel<float, float, float, float, true, false, false>("
        "cublasSplitKParams<float>, float const*, float const*, float*, float const*, "
        "float const*, float const*, float const*, float*, void*, long, float*, int*)",
        "gemm",
        False,
        "fp32",
    ),
    (
        "void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)",
        "elementwise",
        None,
        "unknown",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char*, 3>)",
        "elementwise",
        None,
        "unknown",
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
        "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >("
        "at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
        "unsigned int, float, 4>)",
        "reduction",
        None,
        "unknown",
    ),
    (
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>("
        "cudnnTensorStruct, float const*)",
        "reduction",
        None,
        "unknown",
    ),
    (
        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>("
        "float*, float const*, int, int, int, bool const*, int, bool)",
        "reduction",
        None,
        "unknown",
    ),
    (
        "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, "
        "(cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)",
        "elementwise",
        None,
        "unknown",
    ),
    (
        "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<"
        "float, 4>(long, at::PhiloxCudaState)",
        "elementwise",
        None,
        "unknown",
    ),
    ("at::cuda::(anonymous namespace)::spin_kernel(long)", "other", None, "unknown"),
    ("Memcpy HtoD (Pageable -> Device)", "memcpy", None, "unknown"),
    ("Memset (Device)", "memset", None, "unknown"),
]


@pytest.mark.parametrize(("name", "category", "tensor_core", "dtype"), CASES)
def test_classify_kernel(name: str, category: str, tensor_core: bool | None, dtype: str) -> None:
    info = classify_kernel(name)
    assert (info.category, info.tensor_core, info.dtype) == (category, tensor_core, dtype)


def test_convert_is_not_convolution() -> None:
    assert classify_kernel("void at::native::convert_kernel<float>(float*)").category != (
        "convolution"
    )


@pytest.mark.parametrize(
    ("raw", "dtype"),
    [
        (b'["float", "float", "float", "Scalar", "Scalar"]', "fp32"),
        (b'[\n  "c10::BFloat16",\n  "c10::BFloat16"\n]', "bf16"),
        (b'["", "c10::Half", "c10::Half"]', "fp16"),
        (b'["GenericList", "Int"]', "unknown"),
        (b'["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float"]', "fp8"),
        (b"[]", "unknown"),
    ],
)
def test_input_type_dtype(raw: bytes, dtype: str) -> None:
    assert input_type_dtype(raw) == dtype
