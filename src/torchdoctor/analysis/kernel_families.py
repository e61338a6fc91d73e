"""One name grammar per kernel family: what a library's kernel names spell, and what they do not.

Each family reads a lower-cased kernel name and returns ``(category, tensor_core, dtype,
dtype_in_name)`` or ``None`` when the name is not one of its own. A family says "no tensor cores"
only where its grammar names CUDA-core math (``simt``, ``sgemm``, ``ffma``); a name that leaves
the question open answers ``None`` and the launching operator's dtype, the run's autocast and
TF32 state decide (``analysis.kernels``). The names each rule was checked against are pinned in
``tests/analysis/test_an_kernel_families.py``, most of them from real traces.

Every name is tried against every family until one reads it, so each family first asks a cheap
question the names it reads all pass (a prefix, a substring) and keeps its pattern a string, which
``re`` compiles (and caches) on first use: a trace without a family's kernels never compiles its
grammar (the patterns compiled at import were a tenth of a small trace's ``analyze``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

Parsed = tuple[str, bool | None, str, bool]
"""(category, tensor_core, dtype, dtype_in_name); dtype_in_name False: this family's names carry
no input dtype, so none is claimed from the name."""

_HALF_OR_NARROWER = frozenset({"tf32", "bf16", "fp16", "fp8", "int8"})

# -- cuBLAS(Lt) on Hopper and Blackwell: nvjet_[smNN_]<types>_<tile>... -----------------------------
# The type group is 3 letters (A/B, compute, D: ``tst`` bf16 in, fp32 accumulate, bf16 out) or 5
# (A, B, C, compute, D: ``qqtst`` fp8 inputs, bf16 C/D). The first letter is the input type. Seen:
# ``tst`` under bf16 autocast and ``hsh`` under fp16 autocast on an H200 (torch 2.11, CUDA 13),
# ``sss_tf32`` with TF32 on; ``qqtst`` for fp8 on a B200.
_NVJET = r"^nvjet_(?:sm\d+_)?([a-z]{3}|[a-z]{5})_"
_NVJET_INPUT = {"s": "fp32", "h": "fp16", "t": "bf16", "q": "fp8", "o": "fp8", "e": "fp8"}
_NVJET_INPUT |= {"i": "int8", "d": "fp64"}


def nvjet(n: str) -> Parsed | None:
    m = re.match(_NVJET, n) if n.startswith("nvjet_") else None
    if not m:
        return None
    dtype = _NVJET_INPUT.get(m.group(1)[0], "unknown")
    if dtype == "fp32" and "_tf32" in n:
        dtype = "tf32"
    # Plain fp32 without a tf32 token: cuBLAS may still emulate it on tensor cores (BF16x9 on
    # Blackwell); the name alone does not say no.
    return "gemm", True if dtype in _HALF_OR_NARROWER else None, dtype, dtype != "unknown"


# -- cuBLAS/cuDNN xmma: sm80_xmma_gemm_f32f32_tf32f32_f32_..., sm90_xmma_gemm_bf16bf16_bf16f32_f32 --
# Type groups after the operation: <A><B>_<math A><math B>_<accumulate>. The second group is the
# math the tensor cores (or CUDA cores) ran; ``ffma`` names fp32 fused multiply-adds on CUDA cores.
_XMMA_TYPE = r"tf32|bf16|f16|f32|f64|e4m3|e5m2|i8|s8"
_XMMA = r"^sm\d+_xmma_(gemm|fprop|dgrad|wgrad)\w*?_((?:" + _XMMA_TYPE + r")[a-z0-9]*)_([a-z0-9]+)_"
_XMMA_DTYPE = {"tf32": "tf32", "bf16": "bf16", "f16": "fp16", "f32": "fp32", "f64": "fp64"}
_XMMA_DTYPE |= {"e4m3": "fp8", "e5m2": "fp8", "i8": "int8", "s8": "int8"}


def xmma(n: str) -> Parsed | None:
    m = re.match(_XMMA, n) if "_xmma_" in n else None
    if not m:
        return None
    category = "gemm" if m.group(1) == "gemm" else "convolution"
    math = re.match(_XMMA_TYPE, m.group(3))
    dtype = _XMMA_DTYPE[math.group(0)] if math else "unknown"
    if "ffma" in n or dtype == "fp32":
        return category, False if "ffma" in n else None, dtype, True
    return category, True if dtype in _HALF_OR_NARROWER else None, dtype, dtype != "unknown"


# -- CUTLASS 2 (cutlass_80_tensorop_bf16_s16816gemm_..., cutlass_80_simt_sgemm_...) and CUTLASS 3
# (cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_..., cutlass3x_sm100_simt_sgemm_f32_...) -------------
_CUTLASS = r"cutlass(?:3x)?_(?:\w+?_)?(wmma_tensorop|tensorop|simt)_(\w+)"
_CUTLASS_DTYPE = (
    (r"e4m3|e5m2|f8", "fp8"),
    (r"bf16", "bf16"),
    (r"(?<![a-z])(f16|fp16)|h\d{3,5}gemm|(?<![a-z])h\d{3,5}|hgemm", "fp16"),
    (r"tf32|s\d{3,5}(gemm|fprop|dgrad|wgrad)|s1688|s16816", "tf32"),
    (r"i8\d{2,3}|(?<![a-z0-9])s8(?![0-9x])|int8", "int8"),
    (r"dgemm|f64|d884", "fp64"),
    (r"sgemm|f32", "fp32"),
)


def cutlass(n: str) -> Parsed | None:
    m = re.search(_CUTLASS, n) if "cutlass" in n else None
    if not m:
        return None
    rest = m.group(2)
    dtype = next((d for p, d in _CUTLASS_DTYPE if re.search(p, rest)), "unknown")
    conv = re.search(r"fprop|dgrad|wgrad|conv", rest)
    category = "convolution" if conv else "gemm"
    return category, m.group(1) != "simt", dtype, dtype != "unknown"


# -- cuDNN's fused attention (the SDPA cuDNN backend): cudnn_generated_fort_native_sdpa_sm90_flash_
# fprop_wgmma_f16_knob_7_... . Tensor-core flash attention; "f16" names the 16-bit path that bf16
# and fp16 share, so no input dtype is read from it. Its helpers (cudnn::fusion::...) are not.
def cudnn_sdpa(n: str) -> Parsed | None:
    if "sdpa" in n and ("cudnn" in n or "flash" in n):
        return "attention", True, "unknown", False
    if n.startswith("void cudnn::fusion::") or n.startswith("cudnn::fusion::"):
        if "compute_dot_do_o" in n:
            return "reduction", None, "unknown", False
        if "convert" in n:
            return "elementwise", None, "unknown", False
    return None


# -- FlashAttention 2 (flash_fwd_kernel, flash_bwd_*, pytorch_flash:: in torch) and 3 (Hopper:
# flash::FlashAttnFwdSm90, flash_fwd_..._sm90); every path runs its matmuls on tensor cores. -----
_FLASH = ("flash_fwd", "flash_bwd", "pytorch_flash::", "flash::", "flashattn", "flash_attn")
_TEMPLATE_HALF = (
    (r"bfloat16|__nv_bfloat16|__hip_bfloat16|bf16", "bf16"),
    (r"half_t|c10::half|__half|\bhalf\b|fp16", "fp16"),
    (r"float_e4m3|float_e5m2|e4m3|e5m2", "fp8"),
)


def _template_dtype(n: str) -> str:
    return next((d for p, d in _TEMPLATE_HALF if re.search(p, n)), "unknown")


def flash_attention(n: str) -> Parsed | None:
    if not any(s in n for s in _FLASH):
        return None
    if "combine" in n:  # split-KV's combine step: a reduction over the splits
        return "reduction", None, "unknown", False
    dtype = _template_dtype(n)
    return "attention", True, dtype, dtype != "unknown"


# -- Memory-efficient SDPA (xformers' kernels in torch): fmha_cutlassF_*, fmha_cutlassB_*,
# AttentionKernel<...>, AttentionBackwardKernel<...>. Half types run on tensor cores; fp32 depends
# on the architecture template (3xTF32 on Sm80), so it stays open. -----------------------------
_MEM_EFF = (
    "fmha_cutlassf",
    "fmha_cutlassb",
    "attentionkernel<",
    "attentionbackwardkernel<",
    "mem_eff",
)


def mem_efficient_attention(n: str) -> Parsed | None:
    if not any(s in n for s in _MEM_EFF):
        return None
    dtype = _template_dtype(n)
    if dtype == "unknown" and ("_f32_" in n or "<float" in n):
        dtype = "fp32"
    return "attention", True if dtype in _HALF_OR_NARROWER else None, dtype, dtype != "unknown"


# -- Triton: Inductor names its kernels triton_<kind>_fused_...: poi(ntwise), red(uction),
# per(sistent reduction), tem(plate: a GEMM or conv), mm/bmm. A template's tensor-core use follows
# its operands' dtype (tl.dot on 16-bit inputs is an MMA), which the launching operator gives. ----
_TRITON = r"^triton_([a-z]+)_"
_TRITON_PART = {"poi": "elementwise", "red": "reduction", "per": "reduction", "tem": "gemm"}
_TRITON_PART |= {"mm": "gemm", "bmm": "gemm"}


def triton(n: str) -> Parsed | None:
    m = re.match(_TRITON, n) if n.startswith("triton_") else None
    if not m:
        return None
    category = _TRITON_PART.get(m.group(1), "other")
    if category == "gemm" and "conv" in n:
        category = "convolution"
    return category, None, "unknown", False


# -- OpenAI's triton_kernels (vLLM's MoE on MI300X): _matmul_ogs_NNT_bf16xbf16xmxfp4_... is a GEMM
# whose activation dtype leads its type group; _finalize_matmul_scatter_* sums the experts' rows.
_OGS = r"^_p?_?matmul_ogs_\w*?_(bf16|fp16|f16|fp8|f8|e4m3|fp32|f32)x"
_OGS_DTYPE = {"bf16": "bf16", "fp16": "fp16", "f16": "fp16", "fp8": "fp8", "f8": "fp8"}
_OGS_DTYPE |= {"e4m3": "fp8", "fp32": "fp32", "f32": "fp32"}


def triton_kernels(n: str) -> Parsed | None:
    if n.startswith("_finalize_matmul"):
        return "reduction", None, "unknown", False
    m = re.match(_OGS, n) if "matmul_ogs_" in n else None
    if not m:
        return None
    dtype = _OGS_DTYPE[m.group(1)]
    return "gemm", True if dtype in _HALF_OR_NARROWER else None, dtype, True


# -- Paged-KV cache writes (vLLM reshape_and_cache[_flash], concat_and_cache_mla, SGLang
# store_kvcache): copies into the cache, not attention; Fp8KVCacheDataType)0 is "auto" (no fp8). --
_KV_WRITE = ("reshape_and_cache", "concat_and_cache", "store_kvcache", "copy_blocks", "swap_blocks")


def kv_cache_write(n: str) -> Parsed | None:
    return ("elementwise", None, "unknown", False) if any(s in n for s in _KV_WRITE) else None


# -- CUB's device-wide sorts and scans (torch's sort/unique/embedding backward): data movement,
# category "other", but a known family.
def cub_sort(n: str) -> Parsed | None:
    if "cub::" in n and ("radixsort" in n or "devicescan" in n or "devicesegmented" in n):
        return "other", None, "unknown", False
    return None


# -- NCCL / RCCL collectives (ncclKernel_AllReduce_RING_LL_Sum_float, ncclDevKernel_...). --------
def nccl(n: str) -> Parsed | None:
    if n.startswith(("nccl", "rccl", "void nccl", "void rccl")) or "ncclkernel" in n:
        return "communication", None, "unknown", False
    return None


# -- vLLM's paged attention (paged_attention_v1_kernel<...>, paged_attention_ll4mi_QKV_mfma16_kernel
# <0, __hip_bfloat16, ..., (vllm::Fp8KVCacheDataType)0, ...>): the first template type is the query
# dtype; a cache type of 0 is "auto" (the query's), 1 and 2 an fp8 cache. MFMA tiles are matrix
# cores; the CUDA v1/v2 kernels leave it open.
_KV_FP8 = r"fp8kvcachedatatype\)([0-9])"


def paged_attention(n: str) -> Parsed | None:
    if "paged_attention" not in n:
        return None
    if "reduce" in n:
        return "reduction", None, "unknown", False
    dtype = _template_dtype(n)
    cache = re.search(_KV_FP8, n)
    if cache and cache.group(1) != "0":
        dtype = "fp8"
    return "attention", True if "mfma" in n else None, dtype, dtype != "unknown"


# -- AMD Composable Kernel FMHA (ck_tile::FmhaFwdKernel, FmhaBatchPrefillWithPagedKVCacheKernel):
# MFMA (matrix-core) attention; mangled names spell bf16 as DF16b and fp16 as DF16_.
def ck_fmha(n: str) -> Parsed | None:
    if "ck_tile" not in n or "fmha" not in n:
        return None
    dtype = "bf16" if "df16b" in n else "fp16" if "df16_" in n else _template_dtype(n)
    return "attention", True, dtype, dtype != "unknown"


FamilyName = Literal[
    "paged-attention",
    "ck-fmha",
    "kv-cache-write",
    "nccl",
    "cub-sort",
    "cudnn-sdpa",
    "flash-attention",
    "mem-efficient-attention",
    "triton",
    "triton-kernels",
    "cublas-nvjet",
    "xmma",
    "cutlass",
]
FAMILIES: tuple[tuple[FamilyName, Callable[[str], Parsed | None]], ...] = (
    ("kv-cache-write", kv_cache_write),
    ("paged-attention", paged_attention),
    ("ck-fmha", ck_fmha),
    ("nccl", nccl),
    ("cub-sort", cub_sort),
    ("cudnn-sdpa", cudnn_sdpa),
    ("flash-attention", flash_attention),
    ("mem-efficient-attention", mem_efficient_attention),
    ("triton", triton),
    ("triton-kernels", triton_kernels),
    ("cublas-nvjet", nvjet),
    ("xmma", xmma),
    ("cutlass", cutlass),
)
"""The families in the order they are tried (the first whose grammar reads the name wins)."""
