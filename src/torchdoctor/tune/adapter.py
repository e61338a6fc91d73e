"""How a trial applies a configuration: through ``torchdoctor.Runtime`` when it is installed, or
through a small local adapter that applies the same settings with plain torch calls.

Both offer the calls the worker's loop makes (``setup``, ``loader``, ``autocast``, ``backward``,
``step``, ``to_device``, ``sync``). The worker rebuilds the optimizer for ``optimizer_impl`` itself,
before ``setup``, so the result does not depend on which one applies the rest.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from torchdoctor.config import RuntimeConfig


def pick_device() -> torch.device:
    """The first CUDA device when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def rebuild_optimizer(opt: torch.optim.Optimizer, impl: str) -> torch.optim.Optimizer:
    """The same optimizer over the same parameter groups with the foreach or fused implementation.

    ``default`` returns ``opt`` unchanged. Raises ValueError when the class has no such option.
    """
    if impl == "default":
        return opt
    cls = type(opt)
    params = inspect.signature(cls.__init__).parameters
    if impl not in params:
        raise ValueError(f"{cls.__name__} has no {impl} implementation")
    flags = {"foreach": impl == "foreach" or None, "fused": impl == "fused" or None}
    flags = {k: v for k, v in flags.items() if k in params}
    groups = [{**g, **flags} for g in opt.param_groups]
    kwargs = {k: v for k, v in opt.defaults.items() if k in params and k not in flags}
    cls_any: Any = cls  # optimizer constructors take their options as keyword arguments
    return cls_any(groups, **kwargs, **flags)  # type: ignore[no-any-return]


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


def move(batch: Any, device: torch.device, *, non_blocking: bool, channels_last: bool) -> Any:
    """``batch`` with every tensor on ``device`` (tuples, lists, dicts kept; 4-D optionally NHWC)."""
    if isinstance(batch, torch.Tensor):
        t = batch.to(device, non_blocking=non_blocking)
        if channels_last and t.dim() == 4:
            t = t.contiguous(memory_format=torch.channels_last)
        return t
    if isinstance(batch, dict):
        return {
            k: move(v, device, non_blocking=non_blocking, channels_last=channels_last)
            for k, v in batch.items()
        }
    if isinstance(batch, tuple | list):
        items = [
            move(v, device, non_blocking=non_blocking, channels_last=channels_last) for v in batch
        ]
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    return batch


class LocalBackend:
    """Applies a :class:`RuntimeConfig` with plain torch calls (no device prefetch, no DDP)."""

    name = "local"

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        self.device = pick_device()
        self.scaler: Any = None
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = config.allow_tf32
            torch.backends.cudnn.allow_tf32 = config.allow_tf32
            torch.backends.cudnn.benchmark = config.cudnn_benchmark
        if config.precision == "fp16-mixed":
            self.scaler = torch.amp.GradScaler(self.device.type)

    def setup(self, model: torch.nn.Module, optimizer: Any) -> tuple[Any, Any]:
        """Move (and maybe convert, compile) the model; return it with the optimizer."""
        model = model.to(self.device)
        if self.config.channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        if self.config.compile != "off":
            model = torch.compile(model, mode=self.config.compile, dynamic=self.config.dynamic)  # type: ignore[assignment]
        return model, optimizer

    def loader(
        self, dataset: Any, *, batch_size: int, collate_fn: Callable[..., Any] | None
    ) -> Iterable[Any]:
        """A DataLoader reading ``dataset`` in order, dropping a last partial batch."""
        c = self.config
        workers = c.num_workers or 0
        kwargs: dict[str, Any] = {}
        if workers > 0:
            kwargs["persistent_workers"] = bool(c.persistent_workers)
            if c.prefetch_factor is not None:
                kwargs["prefetch_factor"] = c.prefetch_factor
        return torch.utils.data.DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=False,
            drop_last=True,
            num_workers=workers,
            pin_memory=bool(c.pin_memory) and self.device.type == "cuda",
            collate_fn=collate_fn,
            **kwargs,
        )

    def to_device(self, batch: Any) -> Any:
        """The batch on the trial's device."""
        pinned = bool(self.config.pin_memory) and self.device.type == "cuda"
        return move(
            batch, self.device, non_blocking=pinned, channels_last=self.config.channels_last
        )

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast for the mixed precisions, a no-op otherwise."""
        p = self.config.precision
        if p in ("bf16-mixed", "fp16-mixed"):
            dtype = torch.bfloat16 if p == "bf16-mixed" else torch.float16
            return torch.autocast(self.device.type, dtype=dtype)
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of one micro-batch's loss, divided by the accumulation count (scaled for fp16)."""
        if self.config.grad_accumulation > 1:
            loss = loss / self.config.grad_accumulation
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self, optimizer: Any) -> None:
        """Optimizer step (skipped by the GradScaler on inf/NaN gradients under fp16)."""
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()

    def sync(self) -> None:
        """Wait for the device, so a host clock read after it covers the work."""
        if self.device.type == "cuda":
            torch.cuda.synchronize()


class RuntimeBackend(LocalBackend):
    """Applies the configuration through ``torchdoctor.Runtime`` (the path users take)."""

    name = "runtime"

    def __init__(self, config: RuntimeConfig) -> None:
        from torchdoctor.runtime import Runtime

        super().__init__(config)
        # A placeholder FLOP count: measuring it would run one warm-up step eagerly under
        # FlopCounterMode, and the tuner compares step times, not MFU.
        self.rt: Any = Runtime(config=config, flops_per_step=1.0)

    def setup(self, model: torch.nn.Module, optimizer: Any) -> tuple[Any, Any]:
        return tuple(self.rt.setup(model, optimizer))  # type: ignore[return-value]

    def loader(
        self, dataset: Any, *, batch_size: int, collate_fn: Callable[..., Any] | None
    ) -> Iterable[Any]:
        kwargs: dict[str, Any] = {"drop_last": True}
        if collate_fn is not None:
            kwargs["collate_fn"] = collate_fn
        return self.rt.loader(dataset, batch_size=batch_size, shuffle=False, **kwargs)

    def to_device(self, batch: Any) -> Any:
        return batch  # the runtime's loader already delivers batches on the device

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return self.rt.autocast()

    def backward(self, loss: torch.Tensor) -> None:
        self.rt.backward(loss)

    def step(self, optimizer: Any) -> None:
        self.rt.step(optimizer)


def make_backend(config: RuntimeConfig) -> LocalBackend:
    """The runtime backend when ``torchdoctor.runtime`` imports, else the local adapter.

    ``TORCHDOCTOR_TUNE_BACKEND=local`` (or ``runtime``) forces one.
    """
    choice = os.environ.get("TORCHDOCTOR_TUNE_BACKEND", "auto")
    if choice != "local":
        try:
            return RuntimeBackend(config)
        except ImportError:
            if choice == "runtime":
                raise
    return LocalBackend(config)


def cycle(loader: Iterable[Any]) -> Iterator[Any]:
    """Batches from ``loader`` forever, epoch after epoch, in the same order each epoch."""
    while True:
        yielded = False
        for batch in loader:
            yielded = True
            yield batch
        if not yielded:
            raise ValueError("the dataset has fewer samples than one batch")
