"""The weakest step signal: the end of each top-level model call (inference scripts).

An inference script has no optimizer and often no DataLoader: a decode loop calls the model
once per token, ``model.generate(...)`` calls it once per token inside, an evaluation loop once
per batch. Each outermost ``nn.Module`` call (one not made from inside another module's call)
ends a step. The clock ranks this signal below all the others, so a training loop is still
counted by its optimizer steps (or DataLoader batches) and this signal then removes itself.

Cost. ``nn.Module.__call__`` is wrapped for every module only until the model is known: the
first module called at the top level twice (normally after the first iteration). From then on
only that module's class carries the wrapper, and only calls on that very instance tick. The
wrapper is off while dynamo traces (``DynamoAside``), so compiled code never contains it, and
it does nothing in other processes (DataLoader workers) or threads.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from torchdoctor.capture.clock import StepClock
from torchdoctor.capture.patches import Patcher
from torchdoctor.trace.server_steps import FORWARD_STEP_MARK


class ForwardSteps:
    """Ticks ``clock`` with ``"forward"`` at the end of each top-level model call."""

    def __init__(self, clock: StepClock, after_patch: Callable[[], None] | None = None) -> None:
        self.clock = clock
        self.patcher = Patcher()
        self.calls = 0
        """Top-level module calls seen (all modules while discovering, then the model's)."""
        self.model: str | None = None
        """The class name of the module whose calls are the steps, once known."""
        self._after_patch = after_patch or (lambda: None)
        self._depth = 0
        self._seen: dict[int, int] = {}
        self._root: weakref.ref[Any] | None = None
        self._pid = os.getpid()
        self._thread = threading.get_ident()

    def install(self) -> None:
        """Wrap ``nn.Module.__call__`` (discovery: every module is counted at the top level)."""
        import torch

        base = torch.nn.Module
        orig = base.__call__
        state = self

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != state._thread:
                return orig(module, *args, **kwargs)
            state._depth += 1
            try:
                out = orig(module, *args, **kwargs)
            except BaseException:
                state._depth -= 1
                raise
            state._depth -= 1
            if not state._depth:
                state._top_level(module)
            return out

        self.patcher.patch(base, "__call__", __call__)
        self._after_patch()

    def _top_level(self, module: Any) -> None:
        if os.getpid() != self._pid:  # a forked DataLoader worker calling a transform
            return
        self.calls += 1
        key = id(module)
        self._seen[key] = self._seen.get(key, 0) + 1
        try:
            if self._seen[key] >= 2 and self._root is None:
                self._narrow(module)
        except Exception as exc:  # never let our bookkeeping break the user's forward
            self.clock.errors.append(f"forward steps: {type(exc).__name__}: {exc}")
        self.clock.tick("forward")  # may raise StopScript, as the optimizer hook does
        if self.clock.source not in (None, "forward"):
            self.uninstall()  # a stronger signal counts the steps: stop paying for this one

    def _narrow(self, model: Any) -> None:
        """From now on only ``model``'s own calls tick; the wrapper leaves other classes."""
        self.patcher.restore()
        cls = type(model)
        orig = cls.__call__
        root = weakref.ref(model)
        self._root, self.model = root, cls.__name__
        state = self

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig(module, *args, **kwargs)
            if module is root() and threading.get_ident() == state._thread:
                state._top_level(module)
            return out

        self.patcher.patch(cls, "__call__", __call__)
        self._after_patch()

    def mark_step(self) -> None:
        """Write ``FORWARD_STEP_MARK`` into the trace: the step just begun is a model call."""
        try:
            import torch

            with torch.profiler.record_function(FORWARD_STEP_MARK):
                pass
        except Exception as exc:  # a marker is a bonus; never break the user's loop
            self.clock.errors.append(f"forward step mark: {type(exc).__name__}: {exc}")

    def uninstall(self) -> None:
        """Put ``__call__`` back (idempotent)."""
        self.patcher.restore()

    def snapshot(self) -> dict[str, Any]:
        """For run.json: how many top-level calls were seen and which module they were."""
        return {"top_level_calls": self.calls, "model": self.model}
