"""The module ``Runtime.setup`` returns: the user's model behind DDP / FSDP2 and/or torch.compile.

Calls go to the wrapped (DDP / compiled) module; attributes, ``state_dict`` and
``load_state_dict`` go to the user's own module, so checkpoints carry no ``module.`` or
``_orig_mod.`` prefixes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from torchdoctor.runtime.compile_guard import RecompileGuard
from torchdoctor.runtime.strategy import Strategy


class RuntimeModule(nn.Module):
    """Wraps ``original`` (the user's module) and ``forward_module`` (what actually runs)."""

    def __init__(
        self,
        original: nn.Module,
        forward_module: nn.Module,
        *,
        guard: RecompileGuard | None = None,
        eager: nn.Module | None = None,
        on_first_call: Callable[[], None] | None = None,
        strategy: Strategy | None = None,
    ) -> None:
        super().__init__()
        self._original = original
        self._forward_module = forward_module
        # Not registered as submodules: they share parameters with the modules above.
        self.__dict__["_guard"] = guard
        self.__dict__["_eager"] = eager if eager is not None else forward_module
        # A plain attribute as well: nn.Module's __getattr__ lookup costs a Python call per step.
        self.__dict__["_run"] = forward_module
        self.__dict__["_before_call"] = on_first_call
        self.__dict__["_use_eager"] = False
        self.__dict__["_strategy"] = strategy if strategy is not None else Strategy()
        self._refresh()

    def _refresh(self) -> None:
        # The module to call directly when nothing else is pending: one check per call.
        d = self.__dict__
        plain = d["_before_call"] is None and not d["_use_eager"] and d["_guard"] is None
        d["_fast"] = d["_run"] if plain else None

    def set_before_call(self, hook: Callable[[], None] | None) -> None:
        """Run ``hook`` once, at the start of the next call (the runtime arms its FLOP count so)."""
        self.__dict__["_before_call"] = hook
        self._refresh()

    def set_eager(self, eager: bool) -> None:
        """Route calls to the uncompiled module (FLOP counting: a dispatch mode sees no ops
        inside compiled kernels)."""
        self.__dict__["_use_eager"] = eager
        self._refresh()

    @property
    def module(self) -> nn.Module:
        """The user's own module (no DDP, no compile)."""
        return self._original

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        d = self.__dict__
        fast = d["_fast"]
        if fast is not None:
            return fast(*args, **kwargs)
        hook = d["_before_call"]
        if hook is not None:
            self.set_before_call(None)
            hook()
        if d["_use_eager"]:
            return d["_eager"](*args, **kwargs)
        guard = d["_guard"]
        if guard is not None:
            return guard(d["_run"], args, kwargs)
        return d["_run"](*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._original, name)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """The user's module's state dict (no wrapper prefixes); with FSDP2, gathered into
        full tensors on the CPU (every rank must call it)."""
        if args or kwargs:  # nn.Module's own recursion (destination, prefix, ...)
            return self._original.state_dict(*args, **kwargs)
        return self.__dict__["_strategy"].state_dict(self._original)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> Any:
        """Load a full state dict into the user's module (sharded again under FSDP2)."""
        strategy = self.__dict__["_strategy"]
        if assign or type(strategy) is Strategy:
            return self._original.load_state_dict(state_dict, strict=strict, assign=assign)
        return strategy.load_state_dict(self._original, state_dict, strict=strict)
