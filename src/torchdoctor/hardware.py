"""Peak dense FLOP/s of NVIDIA (and AMD Instinct) GPUs, keyed by model and dtype, for MFU.

Pure Python (no torch import): the runtime looks a GPU up by ``torch.cuda.get_device_name()`` and
the trace analyser by the ``name`` in a trace's ``deviceProperties``. Every rate is the *dense*
tensor-core (or, for fp32, CUDA-core) peak from NVIDIA's datasheets; datasheets print sparse rates
for Ampere and later, which are twice the dense ones and would halve every MFU.

An unknown GPU returns ``None`` so that callers report no MFU rather than a wrong one.
"""

# Annotations evaluated, not strings: typing.NamedTuple compiles each string one (0.4M
# instructions a field, at every start-up).

import re
from typing import NamedTuple

_T = 1e12  # one TFLOP/s in FLOP/s


# A named tuple: analyze imports it before any trace (rules/spec.py says what a dataclass costs).
class GpuSpec(NamedTuple):
    """One GPU model's peak rates."""

    name: str
    """Canonical model name, e.g. "H100 SXM"."""
    compute_capability: tuple[int, int]
    """CUDA compute capability (major, minor)."""
    peak_flops: dict[str, float]
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
# The model word each pattern starts with: a name without it cannot match, so its pattern is
# never compiled (a V100's name compiled all nineteen, the last one matching).
_MODELS = tuple(p[2 : p.index(r"\b", 2)] for p, _ in _PATTERNS)


def _normalise(name: str) -> str:
    return re.sub(r"[-_/]+", " ", name).upper()


def _whole_gpu(name: str) -> GpuSpec | None:
    if name in _BY_NAME:
        return _BY_NAME[name]
    text = _normalise(name)
    for model, (pattern, spec_name) in zip(_MODELS, _PATTERNS, strict=True):
        if model in text and re.search(pattern, text):
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


# -- memory bandwidth --------------------------------------------------------------------------
_TB = 1e12  # one TB/s in bytes/s

HBM_BANDWIDTH: dict[str, tuple[float, str]] = {
    # spec name: (peak device-memory bandwidth in bytes/s, source). Where one model ships with
    # two memory sizes of different bandwidth, the larger size's figure is here and
    # ``memory_bandwidth`` picks the smaller one's from the device's memory (_SMALL_MEMORY).
    "V100 SXM2": (0.900 * _TB, "NVIDIA V100 datasheet: 900 GB/s"),
    "V100 PCIe": (0.900 * _TB, "NVIDIA V100 datasheet: 900 GB/s"),
    "V100S PCIe": (1.134 * _TB, "NVIDIA V100S datasheet: 1134 GB/s"),
    "T4": (0.320 * _TB, "NVIDIA T4 datasheet: 320 GB/s"),
    "A10G": (0.600 * _TB, "AWS G5 documentation: 600 GB/s (GDDR6)"),
    "A10": (0.600 * _TB, "NVIDIA A10 datasheet: 600 GB/s"),
    "A40": (0.696 * _TB, "NVIDIA A40 datasheet: 696 GB/s"),
    "A100 SXM": (2.039 * _TB, "NVIDIA A100 datasheet: 2039 GB/s (80GB SXM), 1555 GB/s (40GB)"),
    "A100 PCIe": (1.935 * _TB, "NVIDIA A100 datasheet: 1935 GB/s (80GB PCIe), 1555 GB/s (40GB)"),
    "L4": (0.300 * _TB, "NVIDIA L4 datasheet: 300 GB/s"),
    "L40S": (0.864 * _TB, "NVIDIA L40S datasheet: 864 GB/s"),
    "H100 SXM": (3.35 * _TB, "NVIDIA H100 datasheet, SXM column: 3.35 TB/s"),
    "H100 PCIe": (2.0 * _TB, "NVIDIA H100 datasheet, PCIe column: 2 TB/s"),
    "H100 NVL": (3.9 * _TB, "NVIDIA H100 NVL datasheet: 3.9 TB/s"),
    "GH200": (4.0 * _TB, "NVIDIA GH200 datasheet: 4 TB/s (96 GB HBM3)"),
    "H200 SXM": (4.8 * _TB, "NVIDIA H200 datasheet: 4.8 TB/s"),
    "H200 NVL": (4.8 * _TB, "NVIDIA H200 datasheet: 4.8 TB/s"),
    "B200": (8.0 * _TB, "NVIDIA HGX B200 datasheet, per GPU: 8 TB/s"),
    "MI300X": (5.3 * _TB, "AMD Instinct MI300X datasheet: 5.3 TB/s"),
}
_SMALL_MEMORY = {"A100 SXM": (48 << 30, 1.555 * _TB), "A100 PCIe": (48 << 30, 1.555 * _TB)}


def memory_bandwidth(name: str, total_memory_bytes: int | None = None) -> tuple[float, str] | None:
    """(peak device-memory bandwidth in bytes/s, its source) for a device name, or None.

    A MIG slice or an unknown GPU returns None: no bandwidth share beats one against the
    wrong peak. ``total_memory_bytes`` tells an A100 40GB (1555 GB/s) from an 80GB one.
    """
    if is_mig(name):
        return None
    spec = _whole_gpu(name)
    if spec is None or spec.name not in HBM_BANDWIDTH:
        return None
    rate, source = HBM_BANDWIDTH[spec.name]
    small = _SMALL_MEMORY.get(spec.name)
    if small and total_memory_bytes and total_memory_bytes < small[0]:
        rate = small[1]
    return rate, source


def peak_bandwidth(name: str, sm_count: int | None = None) -> float | None:
    """Datasheet memory bandwidth (bytes/s) of GPU ``name`` for the roofline, from
    ``HBM_BANDWIDTH``; None when unknown. Only the name is known here: an A100 is the 40GB
    part unless its name says 80GB. A MIG slice gets the whole GPU's bandwidth scaled by its
    share of multiprocessors (as ``lookup_gpu``)."""
    whole = _whole_gpu(name)
    if whole is None or whole.name not in HBM_BANDWIDTH:
        return None
    rate = HBM_BANDWIDTH[whole.name][0]
    small = _SMALL_MEMORY.get(whole.name)
    if small and "80GB" not in _normalise(name).replace(" ", ""):
        rate = small[1]
    if not is_mig(name):
        return rate
    if not sm_count or not whole.sm_count or sm_count > whole.sm_count:
        return None
    return rate * sm_count / whole.sm_count
