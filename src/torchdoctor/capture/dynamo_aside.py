"""Step aside while dynamo traces: torch.compile must never see torchdoctor's wrappers.

Two ways it did, each adding a graph break inside our file to the one the user's ``.item()``
causes: (1) dynamo inlines a Python function found on ``torch.Tensor``, so while it traced a
frame it traced our wrapper; (2) after a graph break the rest of the frame runs eagerly with
dynamo's frame hook on, so our wrapper's own frame was handed to dynamo to compile.

So: (1) dynamo's compile callbacks, which run around each frame it traces, take the patches
off for exactly that time (dynamo then sees torch's own methods); (2) our wrappers' code
objects are marked for dynamo's frame hook to skip (their callees are still processed).
A third way was a cache: dynamo learns which callables are tensor methods from
``dir(torch.Tensor)`` once (``trace_rules.get_tensor_method``), the first time it asks, and
``torch.compile(module)`` asks at once, with our wrappers on. The set then lacked
``TensorBase.item`` & co., so the unbound ``torch.Tensor.item(t)`` was a break of ours even under
``capture_scalar_outputs=True``, where plain torch keeps it in the graph. Each compilation
starts with that cache emptied, so dynamo rebuilds it with the patches off.
``torch._dynamo.reset()`` clears the callbacks, so every ``torch.compile`` call and every
profiled window registers them again.
"""

from __future__ import annotations

import sys
from typing import Any

from torchdoctor.capture import guest, thread_stack
from torchdoctor.capture.patches import Patcher


class DynamoAside:
    """Suspends ``patchers`` from the start to the end of each dynamo compilation."""

    def __init__(self, patchers: list[Patcher]) -> None:
        self.patchers = patchers
        self.compilations = 0
        """Compilations during which the patches were off (for tests and run.json)."""
        self._handler: Any = None

    def _start(self, args: Any) -> None:
        self.compilations += 1
        try:  # the samplers read the stack as it is now, never walk it while dynamo compiles
            thread_stack.hold_own_stack()
        except Exception as exc:
            guest.note("holding the stack while dynamo compiles", exc)
        for p in self.patchers:
            p.suspend()
        try:  # a dynamo without that cache has nothing to rebuild
            from torch._dynamo import trace_rules

            cached = getattr(trace_rules, "get_tensor_method", None)
            getattr(cached, "cache_clear", lambda: None)()
        except Exception as exc:
            guest.note("rebuilding dynamo's tensor methods without our wrappers", exc)

    def _end(self, args: Any) -> None:
        for p in self.patchers:
            p.resume()
        try:
            thread_stack.release_own_stack()
        except Exception as exc:
            guest.note("releasing the stack after dynamo compiled", exc)

    def install(self) -> None:
        """The ``Watcher`` interface: register the callbacks (``ensure_registered``)."""
        self.ensure_registered()

    def ensure_registered(self) -> None:
        """Register the callbacks with dynamo if it is loaded and they are missing."""
        if "torch._dynamo" not in sys.modules:  # nothing compiles without it; stay cheap
            return
        from torch._dynamo.callback import callback_handler

        if self._start not in callback_handler.start_callbacks:
            callback_handler.register_start_callback(self._start)
        if self._end not in callback_handler.end_callbacks:
            callback_handler.register_end_callback(self._end)
        self._handler = callback_handler
        from torch._dynamo.eval_frame import skip_code

        for p in self.patchers:
            for fn in p.installed():
                code = getattr(fn, "__code__", None)
                if code is not None:
                    skip_code(code)

    def uninstall(self) -> None:
        """Remove the callbacks and resume the patches (idempotent); a stack still held (a
        compilation the callbacks never saw end) is let go."""
        thread_stack.release_all()
        handler, self._handler = self._handler, None
        if handler is not None:
            for callbacks, cb in (
                (handler.start_callbacks, self._start),
                (handler.end_callbacks, self._end),
            ):
                if cb in callbacks:
                    callbacks.remove(cb)
        for p in self.patchers:
            p.resume()
