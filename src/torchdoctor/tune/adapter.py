"""How a trial applies a configuration: always through ``torchdoctor.Runtime``, the path users
take, so what a trial measures is what ``Runtime.from_file("torchdoctor.toml")`` will do in the
user's loop.

The worker's loop makes a few calls (``setup``, ``loader``, ``autocast``, ``backward``, ``step``);
:class:`TrialBackend` forwards them to one ``Runtime``. The worker rebuilds the optimizer for
``optimizer_impl`` itself, before ``setup``, with the runtime's own rebuilder
(``runtime/optim.py``), and fails the trial when it cannot: a trial labelled ``fused`` must not
time the default implementation.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from torchdoctor.config import RuntimeConfig


def rebuild_optimizer(opt: torch.optim.Optimizer, impl: str) -> torch.optim.Optimizer:
    """The same optimizer over the same parameter groups with the foreach or fused implementation.

    The runtime's rebuilder does the work (one set of flags for both: ``fused=True`` turns
    ``foreach`` off). ``default`` returns ``opt`` unchanged. Raises ValueError with the runtime's
    reason when the optimizer cannot be rebuilt (no such option, or it has stepped already).
    """
    from torchdoctor.runtime.optim import apply_optimizer_impl

    rebuilt, message = apply_optimizer_impl(opt, impl)
    if rebuilt is opt and impl != "default":
        raise ValueError(message or f"{type(opt).__name__} has no {impl} implementation")
    return rebuilt


def supported_impls(opt: torch.optim.Optimizer, device: torch.device) -> tuple[str, ...]:
    """The optimizer implementations that construct (and so run) for ``opt`` on ``device``."""
    out = ["default"]
    for impl in ("foreach", "fused"):
        try:
            param = torch.nn.Parameter(torch.zeros(2, device=device))
            param.grad = torch.zeros_like(param)
            # A step, not only construction: some checks (device, dtype) happen at the first step.
            cls_any: Any = type(opt)
            cls_any([param], **{impl: True}).step()
            out.append(impl)
        except (TypeError, ValueError, RuntimeError):
            continue
    return tuple(out)


class TrialBackend:
    """One trial's ``torchdoctor.Runtime``: device, precision, compile, loader, DDP under torchrun."""

    name = "runtime"

    def __init__(self, config: RuntimeConfig) -> None:
        from torchdoctor.runtime import Runtime

        # The worker has rebuilt the optimizer already (and failed the trial if it could not).
        config = dataclasses.replace(config, optimizer_impl="default")
        # A placeholder FLOP count: measuring it would run one warm-up step eagerly under
        # FlopCounterMode, and the tuner compares step times, not MFU.
        self.rt: Any = Runtime(config=config, flops_per_step=1.0)
        self.device: torch.device = self.rt.device

    def setup(self, model: torch.nn.Module, optimizer: Any) -> tuple[Any, Any]:
        """The model moved, converted and compiled as configured (DDP under torchrun)."""
        return tuple(self.rt.setup(model, optimizer))

    def loader(
        self, dataset: Any, *, batch_size: int, collate_fn: Callable[..., Any] | None
    ) -> Iterable[Any]:
        """The runtime's loader over ``dataset`` in order, dropping a last partial batch; its
        batches arrive on the device (the loop moves nothing itself)."""
        kwargs: dict[str, Any] = {"drop_last": True}
        if collate_fn is not None:
            kwargs["collate_fn"] = collate_fn
        return self.rt.loader(dataset, batch_size=batch_size, shuffle=False, **kwargs)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return self.rt.autocast()

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of one micro-batch (divided by the accumulation count, scaled for fp16)."""
        self.rt.backward(loss)

    def step(self, optimizer: Any) -> None:
        """Optimizer step at the accumulation boundary (the GradScaler's under fp16)."""
        self.rt.step(optimizer)


def cycle(loader: Iterable[Any]) -> Iterator[Any]:
    """Batches from ``loader`` forever, epoch after epoch, in the same order each epoch."""
    while True:
        yielded = False
        for batch in loader:
            yielded = True
            yield batch
        if not yielded:
            raise ValueError("the dataset has fewer samples than one batch")
