"""The roofline: how fast this hardware can run a step's work, and how close the step came.

``attainable_gpu(name)`` / ``attainable_cpu(measured)`` give an ``Attainable``: the FLOP/s a
device reaches for each dtype and the bytes/s of its memory. On a GPU the rates are the dense
datasheet peaks of ``hardware.py`` (FLOP/s and memory bandwidth) times the share of peak that
tuned libraries reach (``ATTAINABLE_SHARE``); on a CPU they are measured on the machine, once
per run (``capture/machine_rates.py``), with the thread count the script uses.

``roofline_seconds(flops, bytes, dtypes, att)`` is the time the counted work needs at those
rates, operator by operator: each call takes ``max(flops / FLOP/s, bytes / bytes/s)`` (bound
by its arithmetic or by its memory traffic), summed. ``efficiency(...)`` compares it with the
measured step. Pure Python: no torch import, so rules and reports can use it anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from torchdoctor import hardware

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
    if tf32 and "tf32" in rates:
        rates["fp32"] = rates["tf32"]
    return Attainable(
        device=spec.name,
        flops_per_s=rates,
        bytes_per_s=bandwidth * ATTAINABLE_SHARE,
        source=f"{spec.source}; {ATTAINABLE_SHARE:.0%} of the dense peaks",
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
