"""Peak dense FLOP/s of NVIDIA GPUs, keyed by model and dtype, for MFU.

Pure Python (no torch import): the runtime looks a GPU up by ``torch.cuda.get_device_name()`` and
the trace analyser by the ``name`` in a trace's ``deviceProperties``. Every rate is the *dense*
tensor-core (or, for fp32, CUDA-core) peak from NVIDIA's datasheets; datasheets print sparse rates
for Ampere and later, which are twice the dense ones and would halve every MFU.

An unknown GPU returns ``None`` so that callers report no MFU rather than a wrong one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, get_args

PeakDtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]
PEAK_DTYPES: tuple[str, ...] = get_args(PeakDtype)

_T = 1e12  # one TFLOP/s in FLOP/s


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's peak rates."""

    name: str
    """Canonical model name, e.g. "H100 SXM"."""
    compute_capability: tuple[int, int]
    """CUDA compute capability (major, minor)."""
    peak_flops: dict[str, float] = field(default_factory=dict)
    """Dense peak FLOP/s per dtype ("fp32", "tf32", "bf16", "fp16", "fp8"); a dtype the tensor
    cores lack is absent."""

    @property
    def has_tensor_cores(self) -> bool:
        """True from Volta (sm70) on."""
        return self.compute_capability >= (7, 0)

    @property
    def supports_bf16(self) -> bool:
        """bf16 tensor-core math: Ampere (sm80) and later."""
        return self.compute_capability >= (8, 0)

    def peak(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for ``dtype``, or None when the GPU has no such rate."""
        return self.peak_flops.get(dtype)


def _spec(name: str, cc: tuple[int, int], **tflops: float) -> GpuSpec:
    return GpuSpec(
        name=name, compute_capability=cc, peak_flops={k: v * _T for k, v in tflops.items()}
    )


# Sources: NVIDIA datasheets (V100 r5, T4, A10, A40, A100 r4, L4, L40S, H100 / H200 / GH200
# Tensor Core, HGX B200). Sparse figures are halved. AWS publishes no A10G datasheet; the A10
# figures are the closest published ones and are used for it. The HGX B200 datasheet gives no
# plain fp32 rate; 80 TFLOP/s is the commonly quoted figure and is the least certain entry here.
_VOLTA_SXM = _spec("V100 SXM2", (7, 0), fp32=15.7, fp16=125)
_HOPPER_SXM = dict(fp32=66.9, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9)
# The H100 NVL / H200 NVL datasheets give per-GPU sparse rates of 835 (tf32), 1671 (bf16),
# 3341 (fp8) TFLOP/s at 400 W.
_HOPPER_NVL = dict(fp32=60, tf32=417.5, bf16=835.5, fp16=835.5, fp8=1670.5)

GPU_SPECS: tuple[GpuSpec, ...] = (
    _VOLTA_SXM,
    _spec("V100 PCIe", (7, 0), fp32=14, fp16=112),
    _spec("V100S PCIe", (7, 0), fp32=16.4, fp16=130),
    _spec("T4", (7, 5), fp32=8.1, fp16=65),
    _spec("A10G", (8, 6), fp32=31.2, tf32=62.5, bf16=125, fp16=125),
    _spec("A10", (8, 6), fp32=31.2, tf32=62.5, bf16=125, fp16=125),
    _spec("A40", (8, 6), fp32=37.4, tf32=74.8, bf16=149.7, fp16=149.7),
    _spec("A100 SXM", (8, 0), fp32=19.5, tf32=156, bf16=312, fp16=312),
    _spec("A100 PCIe", (8, 0), fp32=19.5, tf32=156, bf16=312, fp16=312),
    _spec("L4", (8, 9), fp32=30.3, tf32=60, bf16=121, fp16=121, fp8=242.5),
    _spec("L40S", (8, 9), fp32=91.6, tf32=183, bf16=362.05, fp16=362.05, fp8=733),
    _spec("H100 SXM", (9, 0), **_HOPPER_SXM),
    _spec("H100 PCIe", (9, 0), fp32=51.2, tf32=378, bf16=756, fp16=756, fp8=1513),
    _spec("H100 NVL", (9, 0), **_HOPPER_NVL),
    _spec("GH200", (9, 0), **_HOPPER_SXM),
    _spec("H200 SXM", (9, 0), **_HOPPER_SXM),
    _spec("H200 NVL", (9, 0), **_HOPPER_NVL),
    _spec("B200", (10, 0), fp32=80, tf32=1100, bf16=2250, fp16=2250, fp8=4500),
)
_BY_NAME = {spec.name: spec for spec in GPU_SPECS}

# (pattern, spec name), most specific first: device names look like "NVIDIA A100-SXM4-80GB",
# "NVIDIA H100 80GB HBM3" (SXM), "NVIDIA H100 PCIe", "Tesla V100-SXM2-16GB", "NVIDIA H200".
_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\bGH200\b", "GH200"),
    (r"\bH200\b.*\bNVL\b", "H200 NVL"),
    (r"\bH200\b", "H200 SXM"),
    (r"\bH100\b.*\bNVL\b", "H100 NVL"),
    (r"\bH100\b.*\b(PCIE|HBM2E)\b", "H100 PCIe"),
    (r"\bH100\b", "H100 SXM"),
    (r"\bB200\b", "B200"),
    (r"\bA100\b.*\bPCIE\b", "A100 PCIe"),
    (r"\bA100\b", "A100 SXM"),
    (r"\bA10G\b", "A10G"),
    (r"\bA10\b", "A10"),
    (r"\bA40\b", "A40"),
    (r"\bL40S\b", "L40S"),
    (r"\bL4\b", "L4"),
    (r"\bT4\b", "T4"),
    (r"\bV100S\b", "V100S PCIe"),
    (r"\bV100\b.*\bPCIE\b", "V100 PCIe"),
    (r"\bV100\b", "V100 SXM2"),
)


def _normalise(name: str) -> str:
    return re.sub(r"[-_/]+", " ", name).upper()


def lookup_gpu(name: str) -> GpuSpec | None:
    """The spec for a device name as CUDA or a trace reports it, or None for an unknown GPU."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    text = _normalise(name)
    for pattern, spec_name in _PATTERNS:
        if re.search(pattern, text):
            return _BY_NAME[spec_name]
    return None


def peak_flops(name: str, dtype: str) -> float | None:
    """Dense peak FLOP/s of GPU ``name`` for ``dtype``; None if the GPU or the rate is unknown."""
    spec = lookup_gpu(name)
    return spec.peak(dtype) if spec is not None else None
