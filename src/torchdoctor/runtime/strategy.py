"""How a model is spread over processes: one small class per strategy, in the manner of
Lightning Fabric's strategy plugins. ``Runtime.setup`` asks the strategy to wrap the model; a
new way to shard is a new class here, not an ``if`` in ``setup``.

- ``SingleDevice``: one process, the model as it is.
- ``DDP``: a full replica per process; gradients all-reduced in buckets during backward.
- ``FSDP2``: parameters sharded over processes with ``torch.distributed.fsdp.fully_shard``,
  one FSDP unit per block (``wrap_policy``) plus the root; each unit's parameters are
  all-gathered before its forward and backward, and its gradients reduce-scattered after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from torchdoctor.config import STRATEGIES
from torchdoctor.errors import UserError
from torchdoctor.runtime.distributed import DistInfo
from torchdoctor.runtime.precision import PrecisionPlugin

WrapPolicy = Callable[[nn.Module], bool]


class Strategy:
    """Wraps the model for a way of training across processes, and undoes it for checkpoints."""

    name: ClassVar[str] = "single"

    def setup_module(self, module: nn.Module) -> nn.Module:
        """The module whose forward runs (``module`` itself, or a wrapper around it)."""
        return module

    def set_grad_sync(self, sync: bool) -> None:
        """Whether the next backward reduces gradients (False on inner accumulation steps)."""

    def state_dict(self, module: nn.Module) -> dict[str, Any]:
        """The full, unsharded state dict of ``module`` (plain tensors on the CPU for FSDP)."""
        return module.state_dict()

    def load_state_dict(
        self, module: nn.Module, state: Mapping[str, Any], strict: bool = True
    ) -> Any:
        """Load a full state dict (as ``state_dict`` returns it) into ``module``."""
        return module.load_state_dict(state, strict=strict)

    def optimizer_state_dict(self, module: nn.Module, optimizer: Any) -> dict[str, Any]:
        """The optimizer's state, unsharded."""
        return optimizer.state_dict()

    def load_optimizer_state_dict(
        self, module: nn.Module, optimizer: Any, state: Mapping[str, Any]
    ) -> None:
        """Load an optimizer state as ``optimizer_state_dict`` returns it."""
        optimizer.load_state_dict(state)

    def describe(self) -> dict[str, Any]:
        """Plain data for the effective configuration."""
        return {"strategy": self.name}


class SingleDevice(Strategy):
    """One process: nothing to wrap."""

    name = "single"


class DDP(Strategy):
    """``DistributedDataParallel`` with ``bucket_cap_mb``-MiB gradient buckets."""

    name = "ddp"

    def __init__(self, device: torch.device, bucket_cap_mb: float = 25.0) -> None:
        self.device = device
        self.bucket_cap_mb = bucket_cap_mb
        self._wrapped: list[nn.Module] = []

    def setup_module(self, module: nn.Module) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        ddp = DistributedDataParallel(module, device_ids=ids, bucket_cap_mb=self.bucket_cap_mb)
        self._wrapped.append(ddp)
        return ddp

    def set_grad_sync(self, sync: bool) -> None:
        # DDP reads this flag in forward: False means "do not all-reduce in the next backward".
        for ddp in self._wrapped:
            ddp.require_backward_grad_sync = sync  # type: ignore[assignment]

    def describe(self) -> dict[str, Any]:
        return {"strategy": self.name, "ddp_bucket_cap_mb": self.bucket_cap_mb}


def block_policy(module: nn.Module) -> WrapPolicy:
    """The default per-block wrapping: every module held in an ``nn.ModuleList`` (transformer
    blocks, by convention); in a model without one, every top-level child with parameters."""
    in_lists = {
        id(child)
        for m in module.modules()
        if isinstance(m, nn.ModuleList)
        for child in m.children()
    }
    if in_lists:
        return lambda m: id(m) in in_lists
    top = {id(c) for c in module.children() if any(True for _ in c.parameters())}
    return lambda m: id(m) in top


def classes_policy(classes: Iterable[type[nn.Module]]) -> WrapPolicy:
    """Wrap every instance of these block classes (Lightning's ``auto_wrap_policy={Block}``)."""
    kinds = tuple(classes)
    return lambda m: isinstance(m, kinds)


class FSDP2(Strategy):
    """Fully sharded data parallel (FSDP2, ``fully_shard``): one unit per block, then the root.

    ``wrap_policy`` picks the blocks (default ``block_policy``); the precision plugin supplies
    the mixed-precision policy (bf16 parameters for compute, fp32 gradient reduction).
    ``reshard_after_forward`` frees gathered parameters after forward (less memory, one more
    all-gather in backward).
    """

    name = "fsdp"

    def __init__(
        self,
        precision: PrecisionPlugin,
        wrap_policy: WrapPolicy | Iterable[type[nn.Module]] | None = None,
        reshard_after_forward: bool = True,
    ) -> None:
        self.precision = precision
        self.wrap_policy = wrap_policy
        self.reshard_after_forward = reshard_after_forward
        self.units: list[str] = []
        """Qualified names of the blocks sharded as units by the last ``setup_module``."""
        self._roots: list[nn.Module] = []

    def _policy(self, module: nn.Module) -> WrapPolicy:
        if self.wrap_policy is None:
            return block_policy(module)
        if callable(self.wrap_policy) and not isinstance(self.wrap_policy, type):
            return self.wrap_policy
        return classes_policy(self.wrap_policy)  # type: ignore[arg-type]

    def setup_module(self, module: nn.Module) -> nn.Module:
        from torch.distributed.fsdp import fully_shard

        policy = self._policy(module)
        self.units = []
        kwargs: dict[str, Any] = {"reshard_after_forward": self.reshard_after_forward}
        mp = self.precision.fsdp_mp_policy()
        if mp is not None:
            kwargs["mp_policy"] = mp
        # Inner modules before outer ones (reversed pre-order): each call groups the parameters
        # that no inner unit owns yet; the root takes what is left (embeddings, head).
        for name, sub in reversed(list(module.named_modules())):
            if sub is not module and policy(sub):
                fully_shard(sub, **kwargs)
                self.units.insert(0, name)
        fully_shard(module, **kwargs)
        self._roots.append(module)
        return module

    def set_grad_sync(self, sync: bool) -> None:
        # Without sync, FSDP2 keeps unsharded gradients and skips reduce-scatter (no_sync).
        for root in self._roots:
            root.set_requires_gradient_sync(sync)  # type: ignore[operator]

    def _options(self, **kwargs: Any) -> Any:
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, cpu_offload=True, **kwargs)

    def state_dict(self, module: nn.Module) -> dict[str, Any]:
        """Gathered full tensors, offloaded to the CPU on rank 0; other ranks get ``{}`` (every
        rank must call it: the gather is collective)."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(module, options=self._options())

    def load_state_dict(
        self, module: nn.Module, state: Mapping[str, Any], strict: bool = True
    ) -> Any:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        return set_model_state_dict(module, dict(state), options=self._options(strict=strict))

    def optimizer_state_dict(self, module: nn.Module, optimizer: Any) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(module, optimizer, options=self._options())

    def load_optimizer_state_dict(
        self, module: nn.Module, optimizer: Any, state: Mapping[str, Any]
    ) -> None:
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        set_optimizer_state_dict(module, optimizer, dict(state), options=self._options())

    def describe(self) -> dict[str, Any]:
        mp = self.precision.fsdp_mp_policy()
        return {
            "strategy": self.name,
            "fsdp_units": len(self.units),
            "fsdp_reshard_after_forward": self.reshard_after_forward,
            "fsdp_param_dtype": None if mp is None else str(mp.param_dtype),
            "fsdp_reduce_dtype": None if mp is None else str(mp.reduce_dtype),
        }


def _processes(info: DistInfo) -> str:
    n = info.world_size
    return f"{n} process" if n == 1 else f"{n} processes"


def select_strategy(
    requested: str,
    info: DistInfo,
    device: torch.device,
    precision: PrecisionPlugin,
    *,
    bucket_cap_mb: float = 25.0,
    wrap_policy: WrapPolicy | Iterable[type[nn.Module]] | None = None,
) -> tuple[Strategy, str]:
    """The strategy for ``requested`` in this process layout, and one sentence why."""
    if requested not in STRATEGIES:
        raise UserError(f"strategy must be one of {', '.join(STRATEGIES)}; got {requested!r}")
    # An explicit ddp/fsdp over a process group that exists runs on it, one process included
    # (a one-GPU job launched by torchrun, the GPU check); "auto" wraps only for several.
    grouped = info.backend is not None and requested in ("ddp", "fsdp")
    if not info.distributed and not grouped:
        why = (
            "one process"
            if requested in ("auto", "single")
            else (
                f"strategy={requested!r} needs several processes (run under torchrun); "
                "training on a single device"
            )
        )
        return SingleDevice(), why
    if requested == "fsdp":
        return FSDP2(precision, wrap_policy), f"FSDP2 over {_processes(info)}"
    if requested == "single":
        raise UserError(
            f"strategy='single' under torchrun with {info.world_size} processes would train "
            "unsynchronised replicas; use 'ddp' or 'fsdp'"
        )
    return DDP(device, bucket_cap_mb), f"DDP over {_processes(info)}"
