"""Forward passes whose outputs never reach a backward while autograd records them.

During one warm-up step, global module hooks see every outermost ``nn.Module`` call (a model's
forward, not its layers): the user's line that made it, whether grad mode was on, and, when the
output carries an autograd graph, a pre-hook on the output's ``grad_fn`` that fires if any
backward ever reaches it. Until the measured steps end, backward has every chance to: an output
still unreached then was recorded for nothing (an evaluation, inference or metrics forward that
should run under ``torch.inference_mode()`` / ``torch.no_grad()``).

The same hooks count, at every depth, how often one module instance is called from one user
line in that step, and whether its first input was a slice of a larger tensor each time (``_base``):
an ``nn.LSTMCell`` stepped over a sequence, or a model called once per sample of a batch, is a
Python loop over work one call would do (``loops``). An autoregressive decoding loop feeds each
call a new tensor, not a slice of one, and is not counted as such.

The module hooks are on for that one step only (global hooks put every module call on the slow
path); the ``grad_fn`` pre-hooks are closures that set a flag, and go when the graph goes.
"""

from __future__ import annotations

from typing import Any

from torchdoctor.capture import guest
from torchdoctor.capture.callsites import user_site
from torchdoctor.code_paths import CodePaths
from torchdoctor.record.account import Forwards, ForwardSite, ModuleLoop

_MAX_CALLS = 256
_MAX_LOOP_KEYS = 4096
LOOP_CALLS = 8
"""Calls of one module instance from one line in one step that make a loop worth naming."""


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
        self._loops: dict[tuple[int, str], dict[str, Any]] = {}

    def begin(self) -> None:
        """Register the global module hooks (never raises)."""
        if self._handles:
            return
        try:
            from torch.nn.modules import module

            self._depth = 0
            self._loops.clear()
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
            import torch

            site = user_site(self.paths, skip=1)
            if self._depth == 0:
                self._pending.append((site, bool(torch.is_grad_enabled())))
            self._depth += 1
            if site is not None:
                self._count_loop(module, site, args, bool(torch.is_grad_enabled()))
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

    def _count_loop(self, module: Any, site: str, args: Any, grad: bool) -> None:
        key = (id(module), site)
        row = self._loops.get(key)
        if row is None:
            if len(self._loops) >= _MAX_LOOP_KEYS:
                return
            import torch

            row = self._loops[key] = {
                "site": site,
                "module": type(module).__name__,
                "cell": isinstance(module, torch.nn.RNNCellBase),
                "calls": 0,
                "grad_calls": 0,
                "bases": {},
            }
        row["calls"] += 1
        row["grad_calls"] += int(grad)
        base = _slice_base(args)
        if base is not None:
            row["bases"][base] = row["bases"].get(base, 0) + 1

    def loops(self) -> tuple[ModuleLoop, ...]:
        """Module instances called ``LOOP_CALLS`` times or more from one user line in the
        watched step, the most called first (16 at most): ``sliced`` when three quarters of the
        calls took a slice of a tensor that was sliced more than once (one tensor, or a few:
        the two sides of a pair)."""
        out = []
        for row in self._loops.values():
            if row["calls"] < LOOP_CALLS:
                continue
            # slices of a tensor sliced more than once (the two sides of a pair are two bases)
            sliced = sum(n for n in row["bases"].values() if n >= 2)
            out.append(
                ModuleLoop(
                    site=row["site"],
                    module=row["module"],
                    cell=row["cell"],
                    calls=row["calls"],
                    grad_calls=row["grad_calls"],
                    sliced=sliced * 4 >= row["calls"] * 3,
                )
            )
        out.sort(key=lambda r: -r.calls)
        return tuple(out[:16])

    def _reach(self, index: int) -> Any:
        def prehook(grad_outputs: Any) -> None:
            self.reached[index] = True
            self.backward_calls += 1

        return prehook

    def snapshot(self) -> Forwards:
        """Outermost forwards by site: calls, how many recorded a graph, how many reached a
        backward; ``unreached`` lists the sites whose recorded graphs never did (the record's
        ``forwards``)."""
        by_site: dict[str, dict[str, Any]] = {}
        for call, reached in zip(self.calls, self.reached, strict=True):
            row = by_site.setdefault(
                str(call["site"]),
                {
                    "site": call["site"] or "",
                    "module": call["module"],
                    "calls": 0,
                    "graphs": 0,
                    "reached": 0,
                },
            )
            row["calls"] += 1
            row["graphs"] += int(call["graph"])
            row["reached"] += int(reached)
        rows = tuple(ForwardSite(**r) for r in by_site.values())
        return Forwards(
            watched_calls=len(self.calls),
            forwards=rows,
            unreached=tuple(r for r in rows if r.graphs and not r.reached),
            any_backward=any(self.reached),
            loops=self.loops(),
        )


def _slice_base(args: Any) -> int | None:
    """``id`` of the tensor the first tensor argument is a view of (None: not a view)."""
    import torch

    for a in args[:2] if isinstance(args, tuple) else ():
        if isinstance(a, torch.Tensor):
            return id(a._base) if a._base is not None else None
    return None


def _grad_fn(output: Any) -> Any:
    """The ``grad_fn`` of the first output tensor that has one (outputs may be nested)."""
    import torch
    from torch.utils._pytree import tree_leaves

    for leaf in tree_leaves(output)[:16]:
        if isinstance(leaf, torch.Tensor) and leaf.grad_fn is not None:
            return leaf.grad_fn
    return None
