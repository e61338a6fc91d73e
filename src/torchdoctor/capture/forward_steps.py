"""The weakest step signal: the end of each top-level model call (inference scripts).

An inference script has no optimizer and often no DataLoader: a decode loop calls the model
once per token, ``model.generate(...)`` calls it once per token inside, an evaluation loop once
per batch. Each outermost ``nn.Module`` call (one not made from inside another module's call)
is a step, ticked when the next one begins, once the model is known (the first module called
twice at the top level; the calls before are warm-up). The clock ranks this signal below all,
and a training loop never sees a tick from it: a backward pass through a model call's output
(noticed by a pre-hook on its ``grad_fn``) turns the signal off before the step it would have
ended is ticked, so gradient accumulation or checkpoint recomputation cannot open a window
early; an optimizer step or DataLoader batch does too.

Cost. ``nn.Module.__call__`` is wrapped for every module only until the model is known: the
first module called at the top level twice (normally after the first iteration). From then on
only that module's class carries the wrapper, and only calls on that very instance tick. The
wrapper is off while dynamo traces (``DynamoAside``), so compiled code never contains it, and
it does nothing in other processes (DataLoader workers) or threads.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from torchdoctor.capture.clock import StepClock
from torchdoctor.capture.patches import Patcher
from torchdoctor.record.rows import ForwardCalls
from torchdoctor.trace.server_steps import FORWARD_STEP_MARK


class ForwardSteps:
    """Ticks ``clock`` with ``"forward"`` for each top-level model call of an inference loop."""

    def __init__(self, clock: StepClock, after_patch: Callable[[], None] | None = None) -> None:
        self.clock = clock
        self.patcher = Patcher()
        self.calls = 0
        """Top-level module calls seen (all modules while discovering, then the model's)."""
        self.model: str | None = None
        """The class name of the module whose calls are the steps, once known."""
        self.backward_seen = False
        """A backward pass ran through a model call's output: a training loop, not ours."""
        self._after_patch = after_patch or (lambda: None)
        self.training: Callable[[], bool] = lambda: False
        """True once the script built an optimizer: a training loop, whose evaluation forwards
        (``estimate_loss()`` before the first step) are not its steps."""
        self._depth = 0
        self._pending = False
        self._discovering = False
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
            # Discovery over (or a stale reference: torch.compile binds ``_orig_mod.__call__``
            # when the module is wrapped): a plain call.
            if not state._discovering or threading.get_ident() != state._thread:
                return orig(module, *args, **kwargs)
            if not state._depth and state._pending:
                state._flush()  # the previous top-level call's step ends here
            state._depth += 1
            try:
                out = orig(module, *args, **kwargs)
            except BaseException:
                state._depth -= 1
                raise
            state._depth -= 1
            if not state._depth:
                state._top_level(module, out)
            return out

        self.patcher.patch(base, "__call__", __call__)
        self._discovering = True
        self._registered()

    def _registered(self) -> None:
        """Tell dynamo to leave our code alone: the wrappers (through ``after_patch``) and the
        methods they call, which run in a resumed frame when a compiled model graph-breaks."""
        self._after_patch()
        if "torch._dynamo" not in sys.modules:
            return
        try:
            from torch._dynamo.eval_frame import skip_code

            for fn in (
                ForwardSteps._top_level,
                ForwardSteps._flush,
                ForwardSteps._narrow,
                ForwardSteps._saw_backward,
                ForwardSteps.uninstall,
                _on_backward,
            ):
                skip_code(fn.__code__)
        except Exception as exc:  # an older or newer dynamo: the wrapper still works
            self.clock.errors.append(f"forward steps: {type(exc).__name__}: {exc}")

    def _top_level(self, module: Any, out: Any) -> None:
        """A top-level call ended: its step is ticked when the next one begins, unless a
        backward pass runs through its output first (then this is a training loop)."""
        if os.getpid() != self._pid:  # a forked DataLoader worker calling a transform
            return
        self.calls += 1
        key = id(module)
        self._seen[key] = self._seen.get(key, 0) + 1
        try:
            if self._seen[key] >= 2 and self._root is None:
                self._narrow(module)
            _on_backward(out, self._saw_backward)
        except Exception as exc:  # never let our bookkeeping break the user's forward
            self.clock.errors.append(f"forward steps: {type(exc).__name__}: {exc}")
        self._pending = True

    def _flush(self) -> None:
        self._pending = False
        if self.backward_seen or self.clock.source not in (None, "forward") or self.training():
            self.uninstall()  # a stronger signal counts the steps: stop paying for this one
        elif self._root is not None:  # only the model's calls, once it is known, are steps
            self.clock.tick("forward")  # may raise StopScript, as the optimizer hook does

    def _saw_backward(self, *_: Any) -> None:
        self.backward_seen = True
        self.uninstall()  # a training loop: the optimizer or batches will count its steps

    def _narrow(self, model: Any) -> None:
        """From now on only ``model``'s own calls count; the wrapper leaves other classes."""
        self._discovering = False
        self.patcher.restore()
        cls = type(model)
        orig = cls.__call__
        root = weakref.ref(model)
        self._root, self.model = root, cls.__name__
        state = self

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            mine = module is root() and threading.get_ident() == state._thread
            if mine and state._pending:
                state._flush()
            out = orig(module, *args, **kwargs)
            if mine:
                state._top_level(module, out)
            return out

        self.patcher.patch(cls, "__call__", __call__)
        self._registered()

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
        self._pending = self._discovering = False
        self.patcher.restore()

    def snapshot(self) -> ForwardCalls:
        """For run.json: how many top-level calls were seen and which module they were."""
        return ForwardCalls(self.calls, self.model, self.backward_seen)


def _on_backward(out: Any, callback: Callable[..., None]) -> None:
    """Call ``callback`` when a backward pass reaches the first tensor of ``out`` with a
    ``grad_fn`` (a tensor, or one inside a tuple, list or dict such as a ModelOutput)."""
    import torch

    items = (
        out.values() if isinstance(out, dict) else out if isinstance(out, list | tuple) else (out,)
    )
    for t in items:
        if isinstance(t, torch.Tensor) and t.grad_fn is not None:
            t.grad_fn.register_prehook(callback)
            return
