"""The roofline: how fast this hardware can run a step's work, and how close the step came.

``attainable_gpu(name)`` / ``attainable_cpu(measured)`` give an ``Attainable``: the FLOP/s a
device reaches for each dtype and the bytes/s of its memory. On a GPU the rates are the dense
datasheet peaks of ``hardware.py`` (FLOP/s and memory bandwidth) times the share of peak that
tuned libraries reach (``ATTAINABLE_SHARE``); on a CPU they are measured on the machine, once
per run (``capture/machine_rates.py``), with the thread count the script uses.

``roofline_seconds(flops, bytes, dtypes, att)`` is the time the counted work needs at those
rates, operator by operator: each call takes ``max(flops / FLOP/s, bytes / bytes/s)`` (bound
by its arithmetic or by its memory traffic), summed. That is the **eager traffic floor**: every
eager operator reads its inputs from memory and writes its outputs back, traffic that fusion
(``torch.compile``) removes, so a compiled step can beat it. ``fusion_floor(...)`` is the floor
no correct implementation beats: the counted FLOPs at the attainable rates, or the compulsory
traffic (parameters, gradients, optimizer state) at the bandwidth, whichever is longer. The gap
between the two is the most fusion can save. ``efficiency(...)`` compares a floor with the
measured step. Pure Python: no torch import, so rules and reports can use it anywhere.

Precision modes: ``fp32`` in the hardware table is the CUDA-core rate; with TF32 on (the run's
``allow_tf32`` / ``set_float32_matmul_precision`` / ``fp32_precision`` state), fp32 matmuls run
at the ``tf32`` rate, and ``Attainable.fp32_matmul`` says which of the two the ``fp32`` rate is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from torchdoctor import hardware


class OptimizerSize(Protocol):
    """What :func:`compulsory_bytes` reads of an optimizer check recorded (``record.rows``'
    ``Optimizer``, a floor above this one)."""

    @property
    def class_name(self) -> str: ...

    @property
    def param_bytes(self) -> int: ...


ATTAINABLE_SHARE = 0.8
"""Share of a GPU's datasheet peak that tuned kernels reach: cuBLAS GEMMs run at 70-90% of
the dense tensor-core peak on large shapes, and copy kernels at 80-90% of the HBM bandwidth."""

# The dtypes a rate table may hold; a dtype without its own rate falls back along this map.
_FALLBACK = {"tf32": "fp32", "fp16": "bf16", "bf16": "fp16", "fp8": "bf16", "fp64": "fp32"}


@dataclass(frozen=True)
class Attainable:
    """Rates a device reaches: FLOP/s by dtype and memory bytes/s."""

    device: str
    """``cpu`` or the GPU's name."""
    flops_per_s: dict[str, float] = field(default_factory=dict)
    """FLOP/s of matrix math by dtype (``fp32``, ``fp64``, ``bf16``, ``fp16``, ``tf32``...)."""
    bytes_per_s: float = 0.0
    """Memory bandwidth (read + write bytes per second)."""
    source: str = ""
    """Where the rates come from (measured how, or which datasheet)."""
    fp32_matmul: str = ""
    """What the ``fp32`` rate is on a GPU: ``"tf32"`` (TF32 on: fp32 matmuls at the TF32
    tensor-core rate) or ``"cuda-cores"`` (TF32 off); empty where not recorded (CPU, old runs)."""

    @property
    def fp32_mode(self) -> str:
        """``fp32_matmul``, or for a record without it, read from the rates (fp32 == tf32)."""
        if self.fp32_matmul or self.device == "cpu":
            return self.fp32_matmul
        fp32, tf32 = self.flops_per_s.get("fp32"), self.flops_per_s.get("tf32")
        if fp32 is None or tf32 is None:
            return ""
        return "tf32" if fp32 == tf32 else "cuda-cores"

    def flops_for(self, dtype: str) -> float | None:
        """FLOP/s for ``dtype``, falling back to a related dtype's rate; None when unknown.
        A GPU's fp64 rate is never guessed from fp32 (consumer parts run fp64 32x slower).
        ``"fp32/conv"`` is a convolution's rate where one was measured, else the dtype's."""
        if "/" in dtype:
            rate = self.flops_per_s.get(dtype)
            return rate if rate is not None else self.flops_for(dtype.split("/", 1)[0])
        rate = self.flops_per_s.get(dtype)
        if rate is not None or (dtype == "fp64" and self.device != "cpu"):
            return rate
        rate = self.flops_per_s.get(_FALLBACK.get(dtype, "fp32"))
        return rate if rate is not None else self.flops_per_s.get("fp32")

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``run.json``."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Attainable:
        """The inverse of ``to_dict``."""
        return cls(
            device=str(d.get("device", "?")),
            flops_per_s={str(k): float(v) for k, v in (d.get("flops_per_s") or {}).items()},
            bytes_per_s=float(d.get("bytes_per_s") or 0.0),
            source=str(d.get("source", "")),
            fp32_matmul=str(d.get("fp32_matmul") or ""),
        )


def attainable_gpu(name: str, sm_count: int | None = None, tf32: bool = False) -> Attainable | None:
    """The attainable rates of GPU ``name`` (``ATTAINABLE_SHARE`` of its datasheet peaks); None
    when the GPU or its memory bandwidth is not in the table. With ``tf32`` (TF32 matmuls on),
    fp32 matrix math runs at the TF32 rate."""
    spec = hardware.lookup_gpu(name, sm_count)
    bandwidth = hardware.peak_bandwidth(name, sm_count)
    if spec is None or not bandwidth:
        return None
    rates = {k: v * ATTAINABLE_SHARE for k, v in spec.peak_flops.items()}
    on_tf32 = tf32 and "tf32" in rates
    if on_tf32:
        rates["fp32"] = rates["tf32"]
    return Attainable(
        device=spec.name,
        flops_per_s=rates,
        bytes_per_s=bandwidth * ATTAINABLE_SHARE,
        source=f"{spec.source}; {ATTAINABLE_SHARE:.0%} of the dense peaks",
        fp32_matmul="tf32" if on_tf32 else "cuda-cores",
    )


# Optimizer state tensors per parameter, by class name (each the size of the parameter); a class
# not listed counts none, which keeps the floor a floor.
OPTIMIZER_STATES = {
    "Adam": 2,
    "AdamW": 2,
    "NAdam": 2,
    "RAdam": 2,
    "Adamax": 2,
    "Adagrad": 1,
    "RMSprop": 1,
    "Adadelta": 2,
    "SGD": 0,
}


@dataclass(frozen=True)
class FusionFloor:
    """The step time no correct implementation beats, and what it counts."""

    floor_ms: float
    """``max(compute_ms, traffic_ms)``."""
    compute_ms: float
    """The counted FLOPs at the attainable rate of their dtype."""
    traffic_ms: float
    """The compulsory bytes at the attainable bandwidth."""
    compulsory_bytes: float
    counted: str
    """What the compulsory bytes are, in words."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return asdict(self)


def compulsory_bytes(optimizers: Sequence[OptimizerSize]) -> tuple[float, str]:
    """(bytes per training step that any implementation moves, what they are) from the
    optimizers ``check`` records (``param_bytes``, ``class``): the parameters read once in the
    forward pass, the gradients written once, and the optimizer step reading parameters,
    gradients and its state and writing parameters and state back. Saved activations and the
    batch are not counted: recomputation can trade activations for FLOPs, and the batch is small
    beside them, so leaving both out keeps it a floor."""
    total, states = 0.0, set()
    for opt in optimizers:
        p = float(opt.param_bytes)
        k = OPTIMIZER_STATES.get(opt.class_name, 0)
        # forward read p, gradient write g, step: read p g state, write p state (g = p in size)
        total += p * (1 + 1 + 2 + 2 * k + 1)
        if k:
            states.add(opt.class_name)
    what = "parameters, gradients" + (f", {'/'.join(sorted(states))} state" if states else "")
    return total, what


def fusion_floor(
    flops_by_dtype: dict[str, float], nbytes: float, att: Attainable, counted: str = ""
) -> FusionFloor:
    """The fusion floor of a step with ``flops_by_dtype`` FLOPs and ``nbytes`` compulsory bytes
    at ``att``'s rates (see ``FusionFloor``); FLOPs of a dtype without a rate count nothing."""
    compute_s = 0.0
    for dtype, flops in flops_by_dtype.items():
        rate = att.flops_for(dtype)
        if rate and flops:
            compute_s += flops / rate
    traffic_s = nbytes / att.bytes_per_s if att.bytes_per_s else 0.0
    return FusionFloor(
        floor_ms=max(compute_s, traffic_s) * 1e3,
        compute_ms=compute_s * 1e3,
        traffic_ms=traffic_s * 1e3,
        compulsory_bytes=nbytes,
        counted=counted,
    )


def roofline_seconds(
    flops: Sequence[float], nbytes: Sequence[float], dtypes: Sequence[str], att: Attainable
) -> float:
    """Seconds the calls need at ``att``'s rates: the sum over calls of
    ``max(flops / FLOP/s of its dtype, bytes / bytes/s)``. A call whose rate is unknown counts
    its memory time only."""
    total = 0.0
    bw = att.bytes_per_s
    cache: dict[str, float | None] = {}
    for f, b, d in zip(flops, nbytes, dtypes, strict=True):
        rate = cache[d] if d in cache else cache.setdefault(d, att.flops_for(d))
        t_math = f / rate if rate and f else 0.0
        t_mem = b / bw if bw else 0.0
        total += t_math if t_math > t_mem else t_mem
    return total


@dataclass(frozen=True)
class Efficiency:
    """How close a step came to its roofline."""

    step_ms: float
    """The measured step (mean, ms)."""
    roofline_ms: float
    """The counted work at the attainable rates (ms): no step can be faster, eager or not."""
    share: float
    """``roofline_ms / step_ms``: 1 is a step that runs at its roofline."""
    flops_share: float
    """Achieved FLOP/s (counted FLOPs over the step) over the attainable rate of the main dtype."""
    bytes_share: float
    """Achieved bytes/s (counted bytes over the step) over the attainable bandwidth."""
    compute_ms: float
    """Part of ``roofline_ms`` bound by arithmetic (the rest is bound by memory traffic)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``run.json``."""
        return {k: round(v, 6) for k, v in asdict(self).items()}


def efficiency(
    step_ms: float,
    flops: Sequence[float],
    nbytes: Sequence[float],
    dtypes: Sequence[str],
    att: Attainable,
) -> Efficiency:
    """The step's efficiency against its roofline (see ``Efficiency``)."""
    roof_s = roofline_seconds(flops, nbytes, dtypes, att)
    compute_s = 0.0
    for f, b, d in zip(flops, nbytes, dtypes, strict=True):
        rate = att.flops_for(d)
        if rate and f and f / rate > (b / att.bytes_per_s if att.bytes_per_s else 0.0):
            compute_s += f / rate
    step_s = step_ms / 1e3
    total_f = float(sum(flops))
    main = _main_dtype(flops, [d.split("/", 1)[0] for d in dtypes])
    rate = att.flops_for(main) if main else None
    return Efficiency(
        step_ms=step_ms,
        roofline_ms=roof_s * 1e3,
        share=min(1.0, roof_s / step_s) if step_s > 0 else 0.0,
        flops_share=(total_f / step_s / rate) if rate and step_s > 0 else 0.0,
        bytes_share=(float(sum(nbytes)) / step_s / att.bytes_per_s)
        if att.bytes_per_s and step_s > 0
        else 0.0,
        compute_ms=compute_s * 1e3,
    )


def _main_dtype(flops: Sequence[float], dtypes: Sequence[str]) -> str | None:
    by: dict[str, float] = {}
    for f, d in zip(flops, dtypes, strict=True):
        by[d] = by.get(d, 0.0) + f
    return max(by, key=lambda k: by[k]) if by and max(by.values()) > 0 else None
