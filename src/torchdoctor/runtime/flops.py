"""Counting the FLOPs of one training step with FlopCounterMode, and what it misses.

FlopCounterMode has formulas for matmuls, convolutions and some attention kernels, but none for
others (e.g. the CPU flash-attention kernel ``_scaled_dot_product_flash_attention_for_cpu``):
they count zero and MFU comes out low. A second dispatch mode watches for attention ops; any that
ran without a count is named, and its FLOPs are estimated from the query/key/value shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

_ATTENTION_MARKERS = ("scaled_dot_product", "flash_attention", "efficient_attention")


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one measured window (forward and backward of one optimizer step)."""

    counted: int
    """FLOPs FlopCounterMode counted."""
    estimated_attention: int
    """FLOPs added for attention kernels FlopCounterMode did not count (from their shapes)."""
    uncounted_ops: tuple[str, ...]
    """Attention ops that ran but counted zero FLOPs."""

    @property
    def total(self) -> int:
        """counted + estimated_attention."""
        return self.counted + self.estimated_attention

    @property
    def note(self) -> str | None:
        """A sentence for the report when attention FLOPs had to be estimated."""
        if not self.uncounted_ops:
            return None
        return (
            f"FlopCounterMode counted no FLOPs for fused attention ({', '.join(self.uncounted_ops)});"
            f" {self.estimated_attention / 1e9:.4g} GFLOP estimated from the attention shapes"
            " were added (pass flops_per_step= to use your own count)"
        )


def _shape(x: Any) -> tuple[int, ...] | None:
    return tuple(x.shape) if isinstance(x, torch.Tensor) else None


def attention_flops(op_name: str, args: tuple[Any, ...]) -> int:
    """FLOPs of one SDPA kernel call from its (grad_out,) query, key, value shapes; 0 if unknown."""
    shapes = [_shape(a) for a in args[:4]]
    try:
        if "backward" in op_name:
            if len(shapes) < 4 or None in shapes:
                return 0
            return int(sdpa_backward_flop_count(*shapes))
        if len(shapes) < 3 or None in shapes[:3]:
            return 0
        return int(sdpa_flop_count(*shapes[:3]))
    except (AssertionError, ValueError, TypeError):
        return 0


class _AttentionSpy(TorchDispatchMode):
    """Records attention ops (name and estimated FLOPs) as they are dispatched."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[Any, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func.overloadpacket)
        if any(m in name for m in _ATTENTION_MARKERS):
            packet = func.overloadpacket
            self.seen[packet] = self.seen.get(packet, 0) + attention_flops(name, tuple(args))
        return func(*args, **(kwargs or {}))


class FlopProbe:
    """Counts FLOPs between ``start()`` and ``stop()`` on this thread."""

    def __init__(self) -> None:
        self._counter = FlopCounterMode(display=False)
        self._spy = _AttentionSpy()
        self._active = False

    def start(self) -> None:
        """Begin counting."""
        self._counter.__enter__()
        self._spy.__enter__()
        self._active = True

    def stop(self) -> FlopCount:
        """Stop counting and return what was counted."""
        if self._active:
            self._spy.__exit__(None, None, None)
            self._counter.__exit__(None, None, None)
            self._active = False
        counts = self._counter.get_flop_counts().get("Global", {})
        counted_ops = {op for op, n in counts.items() if n}
        missed = {op: est for op, est in self._spy.seen.items() if op not in counted_ops}
        return FlopCount(
            counted=int(self._counter.get_total_flops()),
            estimated_attention=sum(missed.values()),
            uncounted_ops=tuple(sorted(str(op) for op in missed)),
        )
