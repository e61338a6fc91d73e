"""What a GPU kernel's name says: its category, whether it runs on tensor cores, and its dtype.

Kernel names are the only record of which library routine ran (cuBLAS, cuBLASLt, cuDNN, CUTLASS,
Triton, NCCL, rocBLAS/Tensile, MIOpen, ATen's own kernels). The library families with a name
grammar of their own are read by ``kernel_families``; the generic rules below cover the rest
(ATen's kernels, the pre-Hopper cuBLAS and cuDNN names, Tensile). A name nobody recognises is
family "unknown": counted and shown as such, never "no tensor cores".
"""

# Annotations evaluated, not strings: typing.NamedTuple compiles each string one (0.4M
# instructions a field, at every start-up).

import re
from functools import lru_cache
from typing import Literal, NamedTuple, get_args

from torchdoctor.analysis.kernel_families import FAMILIES

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


# A named tuple: analyze imports it before any trace (rules/spec.py says what a dataclass costs).
class KernelNameInfo(NamedTuple):
    """What one kernel name tells."""

    category: KernelCategory
    tensor_core: bool | None
    """True: a tensor-core (or AMD matrix-core) kernel; False: the name spells CUDA-core math
    (``simt``, ``sgemm``, ``ffma``); None: the name does not say (or not a GEMM/conv/attention)."""
    dtype: KernelDtype
    """Math dtype read from the name; "unknown" when the name does not say."""
    family: str = "unknown"
    """The name grammar that read it (``cublas-nvjet``, ``cudnn-sdpa``, ``xmma``...; ``generic``
    for the fallback rules, ``unknown`` when nothing recognised the name)."""
    dtype_in_name: bool = True
    """False where this family's names carry no input dtype (cuDNN SDPA's ``f16`` is bf16 and
    fp16 alike): the dtype is then not claimable from the name, only from the operator."""


_COMM = r"nccl|rccl|allreduce|allgather|reducescatter|all_reduce|all_gather"
_ATTENTION = r"flash|fmha|attention|_attn|sdpa|mha_fwd|mha_bwd"
_ATEN_ELEMENTWISE = r"elementwise_kernel|multi_tensor_apply|catarray|_copy_kernel"
# cuDNN's legacy engines (dgrad_engine, wgrad_alg0, winograd, fft2d, scudnn, im2col, cask offset
# kernels), xmma/cutlass fprop/dgrad/wgrad, MIOpen; "conv" but not "convert".
_CONV = r"conv(?!ert)|fprop|dgrad|wgrad|scudnn|winograd|fft2d|im2col|cask_cudnn|miopen|igemm_fwd"
# cuBLAS/cuBLASLt (sgemm, xmma_gemm, nvjet, gemv, split-K reduce, epilogue), CUTLASS, magma,
# Tensile (Cijk_), hipBLASLt, Triton templates.
_GEMM = (
    r"(?<!fb)gemm|gemv|nvjet|^cijk_|cublas|cutlass|splitkreduce|matmul|_mm_|wgmma|gmma|hipblaslt"
)
_REDUCTION = (
    r"reduce|reduction|softmax|norm(?!al)|bn_fw|bn_bw|welford|gammabeta|scan|argmax|argmin"
    r"|topk|cross_entropy|classnllcriterion|_sum_|logsumexp|max_pool|avg_pool|average_pool"
    r"|compute_grad_weight|partial_segment|partials_per_segment|partial_to_segment|searchsorted"
)
_ELEMENTWISE = (
    r"elementwise|vectorized|pointwise|copy|fill|index|scatter|gather|nchwtonhwc|nhwctonchw"
    r"|scalepacked|dropout|clamp|transpose|permute|cat_|where|_add|_mul|relu|gelu|silu"
    r"|rotary|embedding|amp_update_scale|unpack_cudnn|to_dense|bounds_check|offsets_range"
)
_FP8 = r"e4m3|e5m2|(?<!d)fp8(?!kvcache)|f8f8"
_INT8 = r"i8816|i8832|imma|int8|i8i8|s8s8"
_BF16 = r"bf16|bfloat16"
_FP16 = r"fp16|f16f16|h884|h1688|h16816|hmma|half|_f16_|f16_s|tensorop_f16"
_TF32 = r"tf32|tfloat32|s1688gemm|s1688"
_FP64 = r"dgemm|double|f64f64|_d884|dmma"
_TENSOR_CORE = (
    r"tensorop|wmma|hmma|imma|xmma|gmma|wgmma|884|1688|16816|16832|161616|8816|8832"
    r"|tensor\d+x\d+x\d+|^sm9\d_|^sm1\d\d_|_mfma|mfma_"
)
# Names that spell CUDA-core math: cuBLAS sgemm/dgemm (volta_/ampere_/maxwell_sgemm), its
# small-shape and helper kernels (gemv, gemmSN, gemmk1, split-K reduce, epilogue, scal), cutlass
# simt, cuDNN scudnn and its legacy float engines (implicit/explicit_convolve_sgemm, winograd,
# fft, dgrad_engine, wgrad_alg), magma. Only these say "no tensor cores"; a float template alone
# does not.
_SIMT = (
    r"sgemm|simt|scudnn|magma|gemv|gemmk1|gemmsn_|dgemm|splitkreduce|epilogue::impl|scal_kernel"
    r"|dgrad_engine|wgrad_alg|winograd|fft2d|reduce_wgrad|ffma"
)
_FLOAT_TEMPLATE = r"<float[,>]|\(float\*?,|float const\*"
# Tensile names: Cijk_<A layout>_<B layout>_<dtypes>..., e.g. ..._SB_..., ..._HHS_..., ..._BBS_
_TENSILE_DTYPE = r"^cijk_a\w+?_b\w+?_([a-z0-9]+?)_"
_TENSILE_FIRST = {"s": "fp32", "h": "fp16", "b": "bf16", "d": "fp64", "i": "int8", "f": "fp8"}


@lru_cache(maxsize=65536)
def classify_kernel(name: str) -> KernelNameInfo:
    """Category, tensor-core use, dtype and family of one kernel (or memcpy/memset) name: the
    first family grammar that reads it (``kernel_families``), else the generic rules below."""
    n = name.lower()
    if n.startswith("memcpy") or "rocclr_copy" in n:
        return KernelNameInfo("memcpy", None, "unknown", "memcpy", False)
    if n.startswith("memset") or "rocclr_fill" in n:
        return KernelNameInfo("memset", None, "unknown", "memset", False)
    for name_family, parse in FAMILIES:
        got = parse(n)
        if got is not None:
            cat, tc, dt, in_name = got
            return KernelNameInfo(cat, tc, dt, name_family, in_name)  # type: ignore[arg-type]
    category = _generic_category(n)
    family = "generic" if category != "other" else "unknown"
    if category not in MATMUL_CATEGORIES and category != "attention":
        return KernelNameInfo(category, None, "unknown", family)
    dtype = _name_dtype(n)
    return KernelNameInfo(category, _name_tensor_core(n, dtype), dtype, family)


def kernel_category(lowered: str) -> KernelCategory:
    """The category of a lower-cased kernel name (``classify_kernel``'s)."""
    return classify_kernel(lowered).category


def _generic_category(n: str) -> KernelCategory:
    """The category by the generic rules (first matching pattern wins)."""
    if re.search(_COMM, n):
        return "communication"
    if re.search(_ATTENTION, n):
        return "attention"
    if re.search(_ATEN_ELEMENTWISE, n):
        return "elementwise"
    for pattern, category in (
        (_CONV, "convolution"),
        (_GEMM, "gemm"),
        (_REDUCTION, "reduction"),
        (_ELEMENTWISE, "elementwise"),
    ):
        if re.search(pattern, n):
            return category  # type: ignore[return-value]
    return "other"


def _name_dtype(n: str) -> KernelDtype:
    m = re.match(_TENSILE_DTYPE, n)
    if m:
        return _TENSILE_FIRST.get(m.group(1)[0], "unknown")  # type: ignore[return-value]
    for pattern, dtype in (
        (_FP8, "fp8"),
        (_INT8, "int8"),
        (_BF16, "bf16"),
        (_FP16, "fp16"),
        (_TF32, "tf32"),
        (_FP64, "fp64"),
    ):
        if re.search(pattern, n):
            return dtype  # type: ignore[return-value]
    if re.search(_SIMT, n) or re.search(_FLOAT_TEMPLATE, n):
        return "fp32"
    return "unknown"


def _name_tensor_core(n: str, dtype: KernelDtype) -> bool | None:
    if n.startswith("cijk_"):
        return "_mi" in n  # Tensile: MI<m>x<n>x<k> tiles are MFMA (matrix-core) instructions
    if re.search(_SIMT, n):
        return False
    if re.search(_TENSOR_CORE, n) or dtype == "tf32":
        return True
    return None  # the launching operator's dtype and the GPU decide (analysis.kernels)


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
