"""Peak dense FLOP/s of NVIDIA (and AMD Instinct) GPUs, keyed by model and dtype, for MFU.

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
    sm_count: int | None = None
    """Streaming multiprocessors (compute units on AMD) the peak rates assume; set for GPUs that
    can be partitioned (MIG), whose slices get a share of the rates in proportion."""
    source: str = ""
    """Where the rates come from (the datasheet, or why there is none)."""

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


def _spec(
    name: str, cc: tuple[int, int], source: str, sms: int | None = None, **tflops: float
) -> GpuSpec:
    return GpuSpec(
        name=name,
        compute_capability=cc,
        peak_flops={k: v * _T for k, v in tflops.items()},
        sm_count=sms,
        source=source,
    )


# Every rate is dense: datasheet sparse figures are halved. Each row names its source.
# H100 SXM, H200 SXM and GH200 share the SXM5 rates.
_HOPPER_SXM = dict(fp32=66.9, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9)
# The H100 NVL / H200 NVL datasheets give per-GPU sparse rates of 835 (tf32), 1671 (bf16),
# 3341 (fp8) TFLOP/s at 400 W.
_HOPPER_NVL = dict(fp32=60, tf32=417.5, bf16=835.5, fp16=835.5, fp8=1670.5)
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (r4); SXM4 and PCIe rates are the same"

GPU_SPECS: tuple[GpuSpec, ...] = (
    _spec("V100 SXM2", (7, 0), "NVIDIA V100 datasheet, SXM2 column", fp32=15.7, fp16=125),
    _spec("V100 PCIe", (7, 0), "NVIDIA V100 datasheet, PCIe column", fp32=14, fp16=112),
    _spec("V100S PCIe", (7, 0), "NVIDIA V100S datasheet", fp32=16.4, fp16=130),
    _spec("T4", (7, 5), "NVIDIA T4 datasheet (fp16 mixed precision)", fp32=8.1, fp16=65),
    # The A10G (AWS G5) has no NVIDIA datasheet and about half the A10's tensor rate.
    _spec(
        "A10G",
        (8, 6),
        "no datasheet: commonly quoted AWS G5 figures (~70 dense bf16/fp16, ~35 tf32); "
        "fp32 as the A10",
        fp32=31.2,
        tf32=35,
        bf16=70,
        fp16=70,
    ),
    _spec("A10", (8, 6), "NVIDIA A10 datasheet", fp32=31.2, tf32=62.5, bf16=125, fp16=125),
    _spec("A40", (8, 6), "NVIDIA A40 datasheet", fp32=37.4, tf32=74.8, bf16=149.7, fp16=149.7),
    _spec("A100 SXM", (8, 0), _A100, sms=108, fp32=19.5, tf32=156, bf16=312, fp16=312),
    _spec("A100 PCIe", (8, 0), _A100, sms=108, fp32=19.5, tf32=156, bf16=312, fp16=312),
    _spec("L4", (8, 9), "NVIDIA L4 datasheet", fp32=30.3, tf32=60, bf16=121, fp16=121, fp8=242.5),
    _spec(
        "L40S",
        (8, 9),
        "NVIDIA L40S datasheet",
        fp32=91.6,
        tf32=183,
        bf16=362.05,
        fp16=362.05,
        fp8=733,
    ),
    _spec("H100 SXM", (9, 0), "NVIDIA H100 datasheet, SXM column", sms=132, **_HOPPER_SXM),
    _spec(
        "H100 PCIe",
        (9, 0),
        "NVIDIA H100 datasheet, PCIe column",
        sms=114,
        fp32=51.2,
        tf32=378,
        bf16=756,
        fp16=756,
        fp8=1513,
    ),
    _spec("H100 NVL", (9, 0), "NVIDIA H100 NVL datasheet", sms=132, **_HOPPER_NVL),
    _spec("GH200", (9, 0), "NVIDIA GH200 datasheet", sms=132, **_HOPPER_SXM),
    _spec("H200 SXM", (9, 0), "NVIDIA H200 datasheet, SXM column", sms=132, **_HOPPER_SXM),
    _spec("H200 NVL", (9, 0), "NVIDIA H200 datasheet, NVL column", sms=132, **_HOPPER_NVL),
    # fp32 75 per GPU (the 80 quoted elsewhere is GB200's); sparse tf32 2.2, bf16 4.5, fp8 9
    # PFLOP/s halved.
    _spec(
        "B200",
        (10, 0),
        "NVIDIA HGX B200 datasheet, per GPU",
        sms=148,
        fp32=75,
        tf32=1100,
        bf16=2250,
        fp16=2250,
        fp8=4500,
    ),
    # Dense matrix rates; fp32 is the matrix-core rate (vector fp32 is 81.7). ROCm reports
    # gfx942 as capability 9.4; 304 compute units.
    _spec(
        "MI300X",
        (9, 4),
        "AMD Instinct MI300X datasheet, dense matrix rates",
        sms=304,
        fp32=163.4,
        tf32=653.7,
        bf16=1307.4,
        fp16=1307.4,
        fp8=2614.9,
    ),
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
    (r"\bMI300X\b", "MI300X"),
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


def _whole_gpu(name: str) -> GpuSpec | None:
    if name in _BY_NAME:
        return _BY_NAME[name]
    text = _normalise(name)
    for pattern, spec_name in _PATTERNS:
        if re.search(pattern, text):
            return _BY_NAME[spec_name]
    return None


def is_mig(name: str) -> bool:
    """True for a MIG slice's device name ("NVIDIA A100-SXM4-40GB MIG 1g.5gb")."""
    return re.search(r"\bMIG\b", _normalise(name)) is not None


def lookup_gpu(name: str, sm_count: int | None = None) -> GpuSpec | None:
    """The spec for a device name as CUDA or a trace reports it, or None for an unknown GPU.

    A MIG slice's name contains the whole GPU's name; its rates are the whole GPU's scaled by
    ``sm_count`` (the slice's multiprocessors, ``multi_processor_count``) over the GPU's. Without
    ``sm_count`` a MIG slice returns None: no MFU beats one against the whole GPU's peak.
    """
    spec = _whole_gpu(name)
    if spec is None or not is_mig(name):
        return spec
    if not sm_count or not spec.sm_count or sm_count > spec.sm_count:
        return None
    share = sm_count / spec.sm_count
    return GpuSpec(
        name=f"{spec.name} MIG {sm_count} SMs",
        compute_capability=spec.compute_capability,
        peak_flops={k: v * share for k, v in spec.peak_flops.items()},
        sm_count=sm_count,
        source=f"{spec.source}; scaled to {sm_count} of {spec.sm_count} SMs",
    )


def peak_flops(name: str, dtype: str, sm_count: int | None = None) -> float | None:
    """Dense peak FLOP/s of GPU ``name`` for ``dtype``; None if the GPU or the rate is unknown
    (see ``lookup_gpu`` for MIG slices and ``sm_count``)."""
    spec = lookup_gpu(name, sm_count)
    return spec.peak(dtype) if spec is not None else None


_G = 1e9  # one GB/s in bytes/s

# Memory bandwidth (bytes/s) from the same datasheets as the FLOP rates, keyed by spec name;
# ``(default, 80GB variant)`` where the memory size changes it (A100). For the roofline.
PEAK_BANDWIDTH: dict[str, tuple[float, float | None]] = {
    "V100 SXM2": (900 * _G, None),
    "V100 PCIe": (900 * _G, None),
    "V100S PCIe": (1134 * _G, None),
    "T4": (320 * _G, None),
    "A10G": (600 * _G, None),
    "A10": (600 * _G, None),
    "A40": (696 * _G, None),
    "A100 SXM": (1555 * _G, 2039 * _G),
    "A100 PCIe": (1555 * _G, 1935 * _G),
    "L4": (300 * _G, None),
    "L40S": (864 * _G, None),
    "H100 SXM": (3350 * _G, None),
    "H100 PCIe": (2000 * _G, None),
    "H100 NVL": (3900 * _G, None),
    "GH200": (4000 * _G, None),
    "H200 SXM": (4800 * _G, None),
    "H200 NVL": (4800 * _G, None),
    "B200": (8000 * _G, None),
    "MI300X": (5300 * _G, None),
}


def peak_bandwidth(name: str, sm_count: int | None = None) -> float | None:
    """Datasheet memory bandwidth (bytes/s) of GPU ``name``; None when unknown. A MIG slice
    gets the whole GPU's bandwidth scaled by its share of multiprocessors (as ``lookup_gpu``)."""
    whole = _whole_gpu(name)
    if whole is None or whole.name not in PEAK_BANDWIDTH:
        return None
    default, big = PEAK_BANDWIDTH[whole.name]
    rate = big if big is not None and "80GB" in _normalise(name).replace(" ", "") else default
    if not is_mig(name):
        return rate
    if not sm_count or not whole.sm_count or sm_count > whole.sm_count:
        return None
    return rate * sm_count / whole.sm_count
