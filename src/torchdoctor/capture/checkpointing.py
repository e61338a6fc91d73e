"""Activation checkpointing: how much forward time the script runs under
``torch.utils.checkpoint.checkpoint`` in the measured steps.

Backward runs each checkpointed forward a second time (that is how checkpointing saves memory),
so the checkpointed forward's time is the recomputation's cost per step. The wrapper times the
forward on the host: exact on a CPU; on a GPU it is the launch time (a lower bound).
"""

from __future__ import annotations

import functools
from time import perf_counter
from typing import Any

from torchdoctor.capture.patches import Patcher
from torchdoctor.record.rows import Checkpointing


class CheckpointWatch:
    """Counts checkpointed forward calls and their host time while ``measuring`` is on."""

    def __init__(self) -> None:
        self.measuring = False
        self.calls = 0
        """Checkpointed forward calls in the measured steps."""
        self.forward_s = 0.0
        """Host seconds inside those calls (the forward that backward recomputes)."""
        self.calls_total = 0
        self.use_reentrant: set[str] = set()
        self._patcher = Patcher()

    def install(self) -> None:
        """Wrap ``torch.utils.checkpoint.checkpoint``."""
        import torch
        import torch.utils.checkpoint as ckpt

        orig = ckpt.checkpoint
        is_compiling = torch.compiler.is_compiling
        watch = self

        @functools.wraps(orig)
        def checkpoint(function: Any, *args: Any, **kwargs: Any) -> Any:
            if is_compiling():  # dynamo traces checkpoint itself; stay out of its way
                return orig(function, *args, **kwargs)
            watch.calls_total += 1
            watch.use_reentrant.add(repr(kwargs.get("use_reentrant")))
            if not watch.measuring or not torch.is_grad_enabled():
                return orig(function, *args, **kwargs)
            t0 = perf_counter()
            out = orig(function, *args, **kwargs)
            watch.forward_s += perf_counter() - t0
            watch.calls += 1
            return out

        self._patcher.patch(ckpt, "checkpoint", checkpoint)

    def uninstall(self) -> None:
        """Restore ``checkpoint`` (idempotent)."""
        self._patcher.restore()

    def snapshot(self) -> Checkpointing:
        """Calls (all, measured) and the checkpointed forward's host seconds when measured."""
        return Checkpointing(
            self.calls_total, self.calls, self.forward_s, tuple(sorted(self.use_reentrant))
        )
