"""What a GPU kernel's name says: its category, whether it runs on tensor cores, and its dtype.

Kernel names are the only record of which library routine ran (cuBLAS, cuBLASLt, cuDNN, CUTLASS,
Triton, NCCL, rocBLAS/Tensile, MIOpen, ATen's own kernels). The rules below were written against
the names in the real-trace corpus; each one says which family of names it covers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, get_args

KernelCategory = Literal[
    "gemm",
    "convolution",
    "attention",
    "elementwise",
    "reduction",
    "communication",
    "memcpy",
    "memset",
    "other",
]
KERNEL_CATEGORIES: tuple[str, ...] = get_args(KernelCategory)

KernelDtype = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp64", "unknown"]
KERNEL_DTYPES: tuple[str, ...] = get_args(KernelDtype)

MATMUL_CATEGORIES = frozenset({"gemm", "convolution"})
"""Categories whose time counts as GEMM/convolution time for the tensor-core share."""


@dataclass(frozen=True)
class KernelNameInfo:
    """What one kernel name tells."""

    category: KernelCategory
    tensor_core: bool | None
    """True: a tensor-core (or AMD matrix-core) kernel; False: a SIMT kernel; None: the name
    does not say (or the kernel is not a GEMM/convolution)."""
    dtype: KernelDtype
    """Math dtype read from the name; "unknown" when the name does not say."""


_COMM = re.compile(r"nccl|rccl|allreduce|allgather|reducescatter|all_reduce|all_gather")
_ATTENTION = re.compile(r"flash|fmha|attention|_attn|sdpa|mha_fwd|mha_bwd")
_ATEN_ELEMENTWISE = re.compile(r"elementwise_kernel|multi_tensor_apply|catarray|_copy_kernel")
# cuDNN's legacy engines (dgrad_engine, wgrad_alg0, winograd, fft2d, scudnn, im2col, cask offset
# kernels), xmma/cutlass fprop/dgrad/wgrad, MIOpen; "conv" but not "convert".
_CONV = re.compile(
    r"conv(?!ert)|fprop|dgrad|wgrad|scudnn|winograd|fft2d|im2col|cask_cudnn|miopen|igemm_fwd"
)
# cuBLAS/cuBLASLt (sgemm, xmma_gemm, nvjet, gemv, split-K reduce, epilogue), CUTLASS, magma,
# Tensile (Cijk_), hipBLASLt, Triton templates.
_GEMM = re.compile(
    r"(?<!fb)gemm|gemv|nvjet|^cijk_|cublas|cutlass|splitkreduce|matmul|_mm_|wgmma|gmma|hipblaslt"
)
_REDUCTION = re.compile(
    r"reduce|reduction|softmax|norm(?!al)|bn_fw|bn_bw|welford|gammabeta|scan|argmax|argmin"
    r"|topk|cross_entropy|classnllcriterion|_sum_|logsumexp|max_pool|avg_pool|average_pool"
)
_ELEMENTWISE = re.compile(
    r"elementwise|vectorized|pointwise|copy|fill|index|scatter|gather|nchwtonhwc|nhwctonchw"
    r"|scalepacked|dropout|clamp|transpose|permute|cat_|where|_add|_mul|relu|gelu|silu"
)
_TRITON_PART = {
    "poi": "elementwise",
    "red": "reduction",
    "per": "reduction",
    "tem": "gemm",
    "mm": "gemm",
    "bmm": "gemm",
}

_FP8 = re.compile(r"e4m3|e5m2|fp8|f8f8")
_INT8 = re.compile(r"i8816|i8832|imma|int8|i8i8|s8s8")
_BF16 = re.compile(r"bf16|bfloat16")
_FP16 = re.compile(r"fp16|f16f16|h884|h1688|h16816|hmma|half|_f16_|f16_s|tensorop_f16")
_TF32 = re.compile(r"tf32|tfloat32|s1688gemm|s1688")
_FP64 = re.compile(r"dgemm|double|f64f64|_d884|dmma")
_TENSOR_CORE = re.compile(
    r"tensorop|wmma|hmma|imma|xmma|gmma|wgmma|884|1688|16816|16832|161616|8816|8832"
    r"|tensor\d+x\d+x\d+|^sm9\d_|^sm1\d\d_|_mfma|mfma_"
)
# cuBLASLt's Hopper/Blackwell GEMMs (nvjet_<types>_<tile>...). The family alone does not say
# whether tensor cores ran, so the name decides only where it spells the math: "tf32"
# (nvjet_sss_tf32_...), an fp16 triple (nvjet_hsh_, nvjet_sm90_hss_), or plain fp32 "sss"
# without "tf32" (cuBLAS names its TF32 variants). Others (nvjet_tst_ runs bf16 and fp16 alike)
# are left to the launching operator's input dtype.
_NVJET = re.compile(r"^nvjet_(?:sm\d+_)?([a-z]{3})_")
_NVJET_TYPES: dict[str, KernelDtype] = {"hsh": "fp16", "hss": "fp16", "sss": "fp32"}
# SIMT fp32: cuBLAS sgemm (volta_/ampere_/maxwell_sgemm), cutlass simt, cuDNN scudnn and its
# legacy float engines, magma, gemv; xmma with fp32 inputs and no tf32.
_SIMT = re.compile(r"sgemm|simt|scudnn|magma|gemv|gemmk1|_f32f32_f32f32_|dgemm")
_FLOAT_TEMPLATE = re.compile(r"<float[,>]|\(float\*?,|float const\*")
# Tensile names: Cijk_<A layout>_<B layout>_<dtypes>..., e.g. ..._SB_..., ..._HHS_..., ..._BBS_
_TENSILE_DTYPE = re.compile(r"^cijk_a\w+?_b\w+?_([a-z0-9]+?)_")
_TENSILE_FIRST = {"s": "fp32", "h": "fp16", "b": "bf16", "d": "fp64", "i": "int8", "f": "fp8"}


@lru_cache(maxsize=65536)
def classify_kernel(name: str) -> KernelNameInfo:
    """Category, tensor-core use and dtype of one kernel (or memcpy/memset) name."""
    n = name.lower()
    category = kernel_category(n)
    if category not in MATMUL_CATEGORIES and category != "attention":
        return KernelNameInfo(category, None, "unknown")
    dtype = _name_dtype(n)
    return KernelNameInfo(category, _name_tensor_core(n, dtype), dtype)


def kernel_category(lowered: str) -> KernelCategory:
    """The category of a lower-cased kernel name (first matching family wins)."""
    n = lowered
    if n.startswith("memcpy") or "rocclr_copy" in n:
        return "memcpy"
    if n.startswith("memset") or "rocclr_fill" in n:
        return "memset"
    if _COMM.search(n):
        return "communication"
    if _ATTENTION.search(n):
        return "attention"
    if n.startswith("triton_"):
        part = n.split("_")[1] if n.count("_") >= 1 else ""
        return _TRITON_PART.get(part, "other")  # type: ignore[return-value]
    if _ATEN_ELEMENTWISE.search(n):
        return "elementwise"
    for pattern, category in (
        (_CONV, "convolution"),
        (_GEMM, "gemm"),
        (_REDUCTION, "reduction"),
        (_ELEMENTWISE, "elementwise"),
    ):
        if pattern.search(n):
            return category  # type: ignore[return-value]
    return "other"


def _name_dtype(n: str) -> KernelDtype:
    m = _TENSILE_DTYPE.match(n)
    if m:
        return _TENSILE_FIRST.get(m.group(1)[0], "unknown")  # type: ignore[return-value]
    nvjet = _NVJET.match(n)
    if nvjet:
        return "tf32" if _TF32.search(n) else _NVJET_TYPES.get(nvjet.group(1), "unknown")
    for pattern, dtype in (
        (_FP8, "fp8"),
        (_INT8, "int8"),
        (_BF16, "bf16"),
        (_FP16, "fp16"),
        (_TF32, "tf32"),
        (_FP64, "fp64"),
    ):
        if pattern.search(n):
            return dtype  # type: ignore[return-value]
    if _SIMT.search(n) or _FLOAT_TEMPLATE.search(n):
        return "fp32"
    return "unknown"


def _name_tensor_core(n: str, dtype: KernelDtype) -> bool | None:
    if n.startswith("cijk_"):
        return "_mi" in n  # Tensile: MI<m>x<n>x<k> tiles are MFMA (matrix-core) instructions
    if _NVJET.match(n):
        if dtype == "unknown":
            return None  # the launching operator's dtype and the GPU decide (analysis.kernels)
        return dtype in ("tf32", "fp16", "bf16", "fp8", "int8")
    if "_f32f32_f32f32_" in n and "tf32" not in n:
        return False
    if _TENSOR_CORE.search(n) or dtype == "tf32":
        return True
    if _SIMT.search(n) or dtype in ("fp32", "fp64"):
        return False
    return None


_INPUT_DTYPES: dict[str, KernelDtype] = {
    "float": "fp32",
    "c10::half": "fp16",
    "half": "fp16",
    "c10::bfloat16": "bf16",
    "bfloat16": "bf16",
    "double": "fp64",
    "c10::float8_e4m3fn": "fp8",
    "c10::float8_e5m2": "fp8",
    "c10::float8_e4m3fnuz": "fp8",
    "c10::float8_e5m2fnuz": "fp8",
    "signed char": "int8",
    "int8": "int8",
}


@lru_cache(maxsize=4096)
def input_type_dtype(raw: bytes) -> KernelDtype:
    """The dtype of the first floating/int8 tensor in an operator's raw ``Input type`` JSON."""
    for token in re.findall(rb'"([^"]*)"', raw):
        dtype = _INPUT_DTYPES.get(token.decode("utf-8", "replace").lower())
        if dtype is not None:
            return dtype
    return "unknown"
