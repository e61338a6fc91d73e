"""Choosing the numeric precision for the hardware, and the autocast / GradScaler that go with it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from torchdoctor.errors import UserError

_MIXED_DTYPES = {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}


@dataclass(frozen=True)
class PrecisionPlan:
    """What the runtime does about precision, and why."""

    requested: str
    """The configured value (may be "auto")."""
    precision: str
    """The resolved value: fp32, tf32, bf16-mixed or fp16-mixed."""
    reason: str
    """One sentence: why this precision on this device."""
    autocast_dtype: torch.dtype | None
    """dtype for torch.autocast, None when no autocast is applied."""
    use_scaler: bool
    """Whether a GradScaler scales the loss (fp16 only: bf16 has fp32's exponent range)."""
    tf32: bool
    """Whether fp32 matmuls and convolutions run on TF32 tensor cores."""

    @property
    def peak_dtype(self) -> str:
        """The dtype whose peak rate MFU is measured against (a key of the hardware table)."""
        if self.precision == "bf16-mixed":
            return "bf16"
        if self.precision == "fp16-mixed":
            return "fp16"
        return "tf32" if self.tf32 else "fp32"


def cuda_capability(device: torch.device) -> tuple[int, int]:
    """Compute capability (major, minor) of a CUDA device."""
    major, minor = torch.cuda.get_device_capability(device)
    return int(major), int(minor)


def _auto(device: torch.device, capability: tuple[int, int] | None) -> tuple[str, str]:
    if device.type != "cuda" or capability is None:
        return "fp32", (
            f"auto on {device.type}: fp32, since mixed precision on a CPU is often slower "
            "(no bf16 matrix units on most CPUs); set precision='bf16-mixed' to try it"
        )
    cc = f"{capability[0]}.{capability[1]}"
    if capability >= (8, 0):
        return "bf16-mixed", (
            f"auto on a CUDA GPU of compute capability {cc}: bf16-mixed, since bf16 tensor cores "
            "run at fp16 speed and keep fp32's exponent range, so no GradScaler is needed"
        )
    return "fp16-mixed", (
        f"auto on a CUDA GPU of compute capability {cc}: fp16-mixed with a GradScaler, since "
        "this GPU has fp16 but no bf16 tensor cores"
    )


def choose_precision(
    requested: str, device: torch.device, *, allow_tf32: bool = True
) -> PrecisionPlan:
    """Resolve ``requested`` for ``device``; queries the CUDA capability when on CUDA."""
    capability = cuda_capability(device) if device.type == "cuda" else None
    ampere = capability is not None and capability >= (8, 0)
    if requested == "tf32" and not allow_tf32:
        raise UserError("precision='tf32' contradicts allow_tf32=false; choose one")
    if requested == "auto":
        precision, reason = _auto(device, capability)
    else:
        precision, reason = requested, f"precision={requested!r} as configured"
    if precision == "tf32" and not ampere:
        precision = "fp32"
        reason = "tf32 needs a CUDA GPU of compute capability 8.0 or later; running fp32"
    # TF32 also speeds up the fp32 matmuls that autocast leaves in fp32.
    tf32 = ampere and (allow_tf32 or precision == "tf32")
    return PrecisionPlan(
        requested=requested,
        precision=precision,
        reason=reason,
        autocast_dtype=_MIXED_DTYPES.get(precision),
        use_scaler=precision == "fp16-mixed",
        tf32=tf32,
    )


def apply_tf32(plan: PrecisionPlan, device: torch.device) -> None:
    """Set the global TF32 switches for CUDA matmuls and cuDNN convolutions."""
    if device.type != "cuda":
        return
    torch.backends.cuda.matmul.allow_tf32 = plan.tf32
    torch.backends.cudnn.allow_tf32 = plan.tf32


def autocast_factory(plan: PrecisionPlan, device: torch.device) -> Callable[[], Any]:
    """A zero-argument function returning a fresh autocast context (or a no-op one)."""
    dtype = plan.autocast_dtype
    if dtype is None:
        null = contextlib.nullcontext()
        return lambda: null
    device_type = device.type
    return lambda: torch.autocast(device_type=device_type, dtype=dtype)


def make_scaler(plan: PrecisionPlan, device: torch.device, user_scaler: Any | None) -> Any | None:
    """The GradScaler for this plan: the user's, a new one for fp16, or None.

    A scaler with bf16 or fp32 is an error: those have fp32's exponent range, so gradients do not
    underflow and scaling would only cost time.
    """
    if not plan.use_scaler:
        if user_scaler is not None:
            chosen = "" if plan.requested == plan.precision else f" (auto chose {plan.precision})"
            raise UserError(
                f"a GradScaler was passed with precision {plan.precision}{chosen}: only fp16 needs "
                "one, because bf16 and fp32 keep fp32's exponent range and gradients do not "
                "underflow; drop the scaler or use precision='fp16-mixed'"
            )
        return None
    if user_scaler is not None:
        return user_scaler
    return torch.amp.GradScaler(device.type)


class PrecisionPlugin:
    """Everything precision changes in a training step, in one object (Lightning Fabric's
    precision plugins are the model): the forward context, loss scaling, the optimizer step
    with its inf/NaN check, and the FSDP2 mixed-precision policy."""

    def __init__(self, plan: PrecisionPlan, device: torch.device, scaler: Any | None = None):
        self.plan = plan
        self.device = device
        self.scaler = make_scaler(plan, device, scaler)
        self._context = autocast_factory(plan, device)

    @classmethod
    def choose(
        cls,
        requested: str,
        device: torch.device,
        *,
        allow_tf32: bool = True,
        scaler: Any | None = None,
    ) -> PrecisionPlugin:
        """Resolve ``requested`` for ``device`` (see ``choose_precision``), set TF32 switches."""
        plan = choose_precision(requested, device, allow_tf32=allow_tf32)
        apply_tf32(plan, device)
        return cls(plan, device, scaler)

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """A fresh autocast context for the forward pass (a no-op for fp32 / tf32)."""
        return self._context()

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss to call backward on: scaled for fp16, unchanged otherwise."""
        return loss if self.scaler is None else self.scaler.scale(loss)

    def unscale(self, optimizer: Any) -> None:
        """Divide the gradients by the loss scale (before clipping); no-op without a scaler."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer: Any) -> Any:
        """Step ``optimizer``; returns the device tensor of skipped steps (inf/NaN gradients,
        fp16 only) or None. Not read here: reading it would wait for the GPU every step."""
        if self.scaler is None:
            optimizer.step()
            return None
        self.scaler.step(optimizer)
        try:
            # A private GradScaler helper (stable since torch 1.6).
            flags = list(self.scaler._found_inf_per_device(optimizer).values())
        except (AttributeError, AssertionError, KeyError):
            flags = []
        self.scaler.update()
        return any_found_inf(flags) if flags else None

    def fsdp_mp_policy(self) -> Any | None:
        """FSDP2's mixed-precision policy: parameters cast to the autocast dtype for compute,
        gradients reduced in fp32 (summing many low-precision shards loses bits); None in fp32."""
        dtype = self.plan.autocast_dtype
        if dtype is None:
            return None
        from torch.distributed.fsdp import MixedPrecisionPolicy

        return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def any_found_inf(flags: list[torch.Tensor]) -> torch.Tensor:
    """1.0 if any device's GradScaler ``found_inf`` flag is set (the step was skipped), else 0.0.

    A model split over two GPUs in one process has one flag per device: they are moved to the
    first flag's device and reduced with ``amax`` there (a sum would raise across devices, and
    would count one skipped step twice). Stays on the device: no host sync.
    """
    first = flags[0]
    if len(flags) == 1:
        return first.reshape(-1).amax()
    return torch.stack([f.reshape(-1).to(first.device, non_blocking=True) for f in flags]).amax()
