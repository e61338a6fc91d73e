"""Housekeeping calls inside the training loop: ``torch.save`` (checkpoints),
``gc.collect()`` (a full garbage collection) and deep copies of tensors (``copy.deepcopy`` of a
model or of its ``state_dict``: a snapshot), timed at the user's line.

A deep copy is timed tensor by tensor (``Tensor.__deepcopy__``), never by wrapping ``copy.deepcopy`` itself: that function recurses through its module's own
global, and a wrapper there would add a frame to every level of every deep copy in the process.
The site is the innermost user line on the stack (the helper that called ``deepcopy``).

Neither is training work, and neither shows as anything but "time outside operators" in a
trace, where it reads as framework overhead or an input pipeline. Recorded only while
``measuring`` (the steps after the warm-up), and only for calls from the user's own code.
"""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Callable
from time import perf_counter
from typing import Any

from torchdoctor.capture.patches import Patcher
from torchdoctor.code_paths import code_paths
from torchdoctor.record.rows import HousekeepingCall

_MAX_SITES = 32


class HousekeepingWatch:
    """Calls and seconds per (what, user line) of ``torch.save`` and ``gc.collect``."""

    def __init__(self) -> None:
        self.measuring = False
        self.calls: dict[tuple[str, str], list[float]] = {}
        self._copying = False
        self._patcher = Patcher()

    def install(self) -> None:
        """Wrap ``torch.save`` and ``gc.collect``."""
        import torch

        watch = self
        is_user = code_paths().is_user

        def wrap(what: str, orig: Any) -> Any:
            @functools.wraps(orig)
            def call(*args: Any, **kwargs: Any) -> Any:
                if not watch.measuring:
                    return orig(*args, **kwargs)
                frame = sys._getframe(1)
                name = frame.f_code.co_filename
                site = f"{name}:{frame.f_lineno}"
                if name.startswith("<") or not is_user(name):
                    return orig(*args, **kwargs)  # torch's or a library's own call
                t0 = perf_counter()
                try:
                    return orig(*args, **kwargs)
                finally:
                    watch._record(what, site, perf_counter() - t0)

            return call

        self._patcher.patch(torch, "save", wrap("torch.save", torch.save))
        self._patcher.patch(gc, "collect", wrap("gc.collect", gc.collect))

        def wrap_copy(orig: Any) -> Any:
            @functools.wraps(orig)
            def call(tensor: Any, memo: Any) -> Any:
                if not watch.measuring or watch._copying:  # nested: a grad, a Parameter's data
                    return orig(tensor, memo)
                site = _user_site(sys._getframe(1), is_user)
                if site is None:
                    return orig(tensor, memo)  # a library's own copy
                watch._copying = True
                t0 = perf_counter()
                try:
                    return orig(tensor, memo)
                finally:
                    watch._copying = False
                    watch._record("copy.deepcopy", site, perf_counter() - t0)

            return call

        # Plain tensors only (a state dict's): a module's deep copy is ``repeated-construction``'s
        # (its ``Module.__setstate__``), and a Parameter copies itself without this method.
        own = torch.Tensor.__dict__.get("__deepcopy__")
        if own is not None:
            self._patcher.patch(torch.Tensor, "__deepcopy__", wrap_copy(own))

    def _record(self, what: str, site: str, seconds: float) -> None:
        key = (what, site)
        if key in self.calls or len(self.calls) < _MAX_SITES:
            entry = self.calls.setdefault(key, [0, 0.0])
            entry[0] += 1
            entry[1] += seconds

    def uninstall(self) -> None:
        """Restore both (idempotent)."""
        self._patcher.restore()

    def snapshot(self) -> tuple[HousekeepingCall, ...]:
        """One row per call site (``config.housekeeping``), costliest first."""
        rows = (HousekeepingCall(w, s, int(c), t) for (w, s), (c, t) in self.calls.items())
        return tuple(sorted(rows, key=lambda r: -r.seconds))


def _user_site(frame: Any, is_user: Callable[[str], bool], depth: int = 64) -> str | None:
    """``file:line`` of the innermost user frame from ``frame`` out, None within ``depth``."""
    while frame is not None and depth > 0:
        name = frame.f_code.co_filename
        if not name.startswith("<") and is_user(name):
            return f"{name}:{frame.f_lineno}"
        frame, depth = frame.f_back, depth - 1
    return None
