"""Forward passes whose outputs never reach a backward while autograd records them.

During one warm-up step, global module hooks see every outermost ``nn.Module`` call (a model's
forward, not its layers): the user's line that made it, whether grad mode was on, and, when the
output carries an autograd graph, a pre-hook on the output's ``grad_fn`` that fires if any
backward ever reaches it. Until the measured steps end, backward has every chance to: an output
still unreached then was recorded for nothing (an evaluation, inference or metrics forward that
should run under ``torch.inference_mode()`` / ``torch.no_grad()``).

The module hooks are on for that one step only (global hooks put every module call on the slow
path); the ``grad_fn`` pre-hooks are closures that set a flag, and go when the graph goes.
"""

from __future__ import annotations

from typing import Any

from torchdoctor.capture import guest
from torchdoctor.capture.callsites import user_site
from torchdoctor.capture.code_paths import CodePaths

_MAX_CALLS = 256


class ForwardWatch:
    """Watches the outermost module calls of one step (see the module docstring)."""

    def __init__(self, paths: CodePaths) -> None:
        self.paths = paths
        self.calls: list[dict[str, Any]] = []
        self.reached: list[bool] = []
        self.backward_calls = 0
        self._depth = 0
        self._handles: list[Any] = []
        self._pending: list[tuple[str | None, bool]] = []

    @property
    def watching(self) -> bool:
        """Between ``begin`` and ``end``."""
        return bool(self._handles)

    def begin(self) -> None:
        """Register the global module hooks (never raises)."""
        if self._handles:
            return
        try:
            from torch.nn.modules import module

            self._depth = 0
            self._handles = [
                module.register_module_forward_pre_hook(self._pre),
                module.register_module_forward_hook(self._post),
            ]
        except Exception as exc:
            guest.note("watching forward calls", exc)
            self.end()

    def end(self) -> None:
        """Remove the module hooks (the ``grad_fn`` pre-hooks keep listening)."""
        handles, self._handles = self._handles, []
        for h in handles:
            guest.remove_hook(h)  # module hooks are iterated over a copy: removal is safe
        self._depth = 0
        self._pending.clear()

    def _pre(self, module: Any, args: Any) -> None:
        try:
            if self._depth == 0:
                import torch

                site = user_site(self.paths, skip=1)
                self._pending.append((site, bool(torch.is_grad_enabled())))
            self._depth += 1
        except Exception as exc:
            guest.note("watching forward calls", exc)

    def _post(self, module: Any, args: Any, output: Any) -> None:
        try:
            self._depth = max(0, self._depth - 1)
            if self._depth or not self._pending:
                return
            site, grad = self._pending.pop()
            if len(self.calls) >= _MAX_CALLS:
                return
            node = _grad_fn(output) if grad else None
            index = len(self.calls)
            self.calls.append(
                {
                    "site": site,
                    "module": type(module).__name__,
                    "grad_enabled": grad,
                    "graph": node is not None,
                }
            )
            self.reached.append(False)
            if node is not None:
                node.register_prehook(self._reach(index))
        except Exception as exc:
            guest.note("watching forward calls", exc)

    def _reach(self, index: int) -> Any:
        def prehook(grad_outputs: Any) -> None:
            self.reached[index] = True
            self.backward_calls += 1

        return prehook

    def snapshot(self) -> dict[str, Any]:
        """Outermost forwards by site: calls, how many recorded a graph, how many reached a
        backward; ``unreached`` lists the sites whose recorded graphs never did."""
        by_site: dict[str, dict[str, Any]] = {}
        for call, reached in zip(self.calls, self.reached, strict=True):
            row = by_site.setdefault(
                str(call["site"]),
                {
                    "site": call["site"],
                    "module": call["module"],
                    "calls": 0,
                    "graphs": 0,
                    "reached": 0,
                },
            )
            row["calls"] += 1
            row["graphs"] += int(call["graph"])
            row["reached"] += int(reached)
        rows = list(by_site.values())
        return {
            "watched_calls": len(self.calls),
            "forwards": rows,
            "unreached": [r for r in rows if r["graphs"] and not r["reached"]],
            "any_backward": any(self.reached),
        }


def _grad_fn(output: Any) -> Any:
    """The ``grad_fn`` of the first output tensor that has one (outputs may be nested)."""
    import torch
    from torch.utils._pytree import tree_leaves

    for leaf in tree_leaves(output)[:16]:
        if isinstance(leaf, torch.Tensor) and leaf.grad_fn is not None:
            return leaf.grad_fn
    return None
