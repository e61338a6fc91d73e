"""``fused-optimizer``: the user's ``torch.optim.<Class>(...)`` with ``fused=True`` (or
``foreach=True`` where the class has no fused kernel), instead of a Python loop per tensor.

Only where that class accepts it in the torch in use: the class's real ``__init__`` signature
is read, and a one-parameter optimizer of that class is built and stepped on the run's device
(some checks, of device and dtype, only happen at the first step). A ``foreach=False`` the
user wrote is replaced in place (fused and foreach together raise). On a CPU run with more
than one intra-op thread it is foreach, as the printed remedy says (``rules/optimizer_fixes.py``).
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import libcst as cst

from torchdoctor.fix.codemods.base import one_call, parse_or_refuse
from torchdoctor.fix.cst_tools import (
    Parsed,
    arg_index,
    innermost_spanning,
    literal,
    rename_arg,
    set_args,
)
from torchdoctor.fix.model import FindingRef, Refusal, Rewrite, Target
from torchdoctor.record.rows import Optimizer
from torchdoctor.record.values import as_rows
from torchdoctor.rules.optimizer_fixes import fused_slower

if TYPE_CHECKING:
    from torchdoctor.fix.context import FixContext


@lru_cache(maxsize=32)
def supported(cls_name: str, device: str) -> tuple[str, ...] | str:
    """The implementations (``fused``, ``foreach``) ``torch.optim.<cls_name>`` accepts and runs
    on ``device``, best first; a string says why none can be checked."""
    try:
        import torch
    except ImportError:
        return "torch is not installed here: cannot check the optimizer's signature"
    cls = getattr(torch.optim, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        return f"{cls_name} is not a torch.optim optimizer"
    params = inspect.signature(cls.__init__).parameters
    out = []
    for impl in ("fused", "foreach"):
        if impl not in params:
            continue
        try:
            p = torch.nn.Parameter(torch.zeros(2, device=device))
            p.grad = torch.zeros_like(p)
            cls_any: Any = cls
            cls_any([p], **{impl: True}).step()
        except (TypeError, ValueError, RuntimeError):
            continue
        out.append(impl)
    return tuple(out)


def _for_loop_optimizers(finding: FindingRef, ctx: FixContext) -> list[Optimizer]:
    rows = finding.evidence.get("for_loop_optimizers")
    if isinstance(rows, list):
        found = [Optimizer.from_dict(r) for r in as_rows(rows)]
    else:
        found = [o for o in ctx.record.config.optimizers if o.impl == "for-loop"]
    return [o for o in found if o.class_name]


def is_optimizer_call(cls_name: str) -> Any:
    def keep(p: Parsed, node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Call) and p.is_call_to(
            node,
            (f"torch.optim.{cls_name}", f"torch.optim.{cls_name.lower()}.{cls_name}"),
            cls_name,
        )

    return keep


class FusedOptimizer:
    id = "fused-optimizer"
    title = "fused (or foreach) optimizer step"
    precision = "fp32"

    def plan(self, finding: FindingRef, ctx: FixContext) -> list[Target | Refusal]:
        out: list[Target | Refusal] = []
        for opt in _for_loop_optimizers(finding, ctx)[:1]:  # the stepping (first) optimizer
            name = opt.class_name
            devices = opt.param_devices or ["cuda" if ctx.cuda else "cpu"]
            impls = supported(name, str(devices[0]))
            if isinstance(impls, str):
                out.append(Refusal(impls))
                continue
            if fused_slower(opt, ctx.record.modes.intra_op_threads, not ctx.cuda):
                impls = tuple(i for i in impls if i != "fused")  # as the printed remedy says
            if not impls:
                out.append(
                    Refusal(
                        f"{name} accepts neither fused=True nor foreach=True on {devices[0]} here"
                    )
                )
                continue
            params = {"class": name, "impl": impls[0]}
            out.append(one_call(self.id, ctx, is_optimizer_call(name), f"{name}(...)", params))
        return out

    def rewrite(self, source: str, target: Target) -> Rewrite | Refusal:
        p = parse_or_refuse(source)
        if isinstance(p, Refusal):
            return p
        name, impl = target.params["class"], target.params["impl"]
        keep = is_optimizer_call(name)
        call = innermost_spanning(p, [c for c in p.all(cst.Call) if keep(p, c)], target.line)
        if call is None:
            return Refusal(f"no {name}(...) call at line {target.line}")
        if any(a.star == "**" for a in call.args):
            return Refusal("the call passes **kwargs: its options are built at run time")
        for key in ("fused", "foreach"):
            i = arg_index(call, key)
            if i is None:
                continue
            value = literal(call.args[i].value)
            if value is True:
                return Refusal(f"{name} already has {key}=True", already=True)
            if value not in (False, None):
                return Refusal(f"{key} is set from `{p.code_of(call.args[i].value)}`: set it there")
        other = "foreach" if impl == "fused" else "fused"
        if arg_index(call, impl) is None and arg_index(call, other) is not None:
            new = rename_arg(call, other, impl, "True")  # foreach=False -> fused=True, in place
        else:
            new = set_args(call, {impl: "True"})
        return Rewrite(p.replace(call, new), f"{name}(..., {impl}=True)")


CODEMOD = FusedOptimizer()
