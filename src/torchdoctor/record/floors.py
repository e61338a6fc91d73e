"""The floors of a recorded ``check`` step (``run.json``): the eager traffic floor it recorded,
the fusion floor no correct implementation beats, the gap fusion could close, and MFU against the
datasheet. Re-derived from the record, so recorded runs are re-judged the same way. Plain data; no
torch import.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from torchdoctor import hardware, roofline
from torchdoctor.record.values import as_dict, as_number

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord


@dataclass(frozen=True)
class StepFloors:
    """A step's floors (ms per step) and its MFU."""

    eager_traffic_ms: float | None
    """Every eager operator's counted FLOPs and bytes at the attainable rates, op by op: what
    the operators as run need; fusion removes traffic, so a compiled step can beat it."""
    fusion: roofline.FusionFloor | None
    """The floor no correct implementation beats (``roofline.fusion_floor``); None without
    counted FLOPs or rates."""
    mfu: float | None
    """Counted FLOPs per second of the step over the datasheet dense peak of ``mfu_dtype``."""
    mfu_peak_tflops: float | None
    mfu_dtype: str
    """The dtype holding most FLOPs, as the peak reads it (``tf32`` for fp32 with TF32 on)."""
    device: str

    @property
    def floor_ms(self) -> float | None:
        """The lowest floor: the fusion floor where known, else the eager traffic floor."""
        return self.fusion.floor_ms if self.fusion is not None else self.eager_traffic_ms

    @property
    def fusion_gain_ms(self) -> float | None:
        """Eager traffic floor minus fusion floor: the most fusion (``torch.compile``) saves."""
        if self.fusion is None or self.eager_traffic_ms is None:
            return None
        return max(0.0, self.eager_traffic_ms - self.fusion.floor_ms)

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {**asdict(self), "floor_ms": self.floor_ms, "fusion_gain_ms": self.fusion_gain_ms}


def step_floors(run: RunRecord, step_ms: float | None = None) -> StepFloors | None:
    """The floors of ``run``'s step; None when nothing was counted or no rates are known."""
    attainable = as_dict(run.roofline.get("attainable"))
    if not attainable:
        return None
    att = roofline.Attainable.from_dict(attainable)
    flops = {k: w.flops for k, w in run.roof.by_dtype.items()}
    eager = run.roof.roofline_ms
    fusion = None
    if any(flops.values()):
        nbytes, counted = roofline.compulsory_bytes(run.config.optimizers)
        fusion = roofline.fusion_floor(flops, nbytes, att, counted)
    step = step_ms or as_number(as_dict(run.roofline.get("efficiency")).get("step_ms"))
    main = max(flops, key=lambda k: flops[k]) if any(flops.values()) else ""
    peak_dtype = "tf32" if main == "fp32" and att.fp32_mode == "tf32" else main
    peak = hardware.peak_flops(att.device, peak_dtype) if main and att.device != "cpu" else None
    total = sum(flops.values())
    mfu = total / (step / 1e3) / peak if peak and step else None
    return StepFloors(
        eager_traffic_ms=eager,
        fusion=fusion,
        mfu=mfu,
        mfu_peak_tflops=peak / 1e12 if peak else None,
        mfu_dtype=peak_dtype,
        device=att.device,
    )
