"""``inference-mode``: an evaluation or inference loop that records autograd history it never
uses, run under ``torch.inference_mode()``.

The loop is the innermost ``for`` / ``while`` around the line the finding names. Refused when
the loop trains (``.backward()``, ``.step()``, ``.zero_grad()`` inside), or runs under
``torch.enable_grad()``; a loop already under ``no_grad`` or ``inference_mode`` needs nothing.
Tensors made under inference mode cannot later be saved for backward: the prove step runs
the patched script, so a script that does so fails there and the change is left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdoctor.fix.codemods.anomaly import _sites
from torchdoctor.fix.codemods.base import located_targets, parse_or_refuse
from torchdoctor.fix.cst_tools import Parsed, contains_call, ensure_import, full_name, wrap
from torchdoctor.fix.model import FindingRef, Refusal, Rewrite, Target

if TYPE_CHECKING:
    from torchdoctor.fix.context import FixContext

TRAINING_CALLS = ("backward", "step", "zero_grad")


def grad_context(p: Parsed, node: cst.CSTNode) -> str | None:
    """``no_grad`` / ``inference_mode`` / ``enable_grad`` of the innermost ``with`` (or
    decorator) around ``node`` that sets one."""
    for a in p.ancestors(node):
        items = a.items if isinstance(a, cst.With) else []
        decorators = a.decorators if isinstance(a, cst.FunctionDef) else []
        exprs = [i.item for i in items] + [d.decorator for d in decorators]
        for e in exprs:
            name = full_name(e.func if isinstance(e, cst.Call) else e).rsplit(".", 1)[-1]
            if name in ("no_grad", "inference_mode", "enable_grad"):
                return name
    return None


class InferenceMode:
    id = "inference-mode"
    title = "evaluation loops under torch.inference_mode()"
    precision = "fp32"

    def plan(self, finding: FindingRef, ctx: FixContext) -> list[Target | Refusal]:
        sites = _sites(finding)
        if not sites:
            return [Refusal("no site of the loop was recorded: cannot tell which loop evaluates")]
        return located_targets(self.id, ctx, sites[:4])

    def rewrite(self, source: str, target: Target) -> Rewrite | Refusal:
        p = parse_or_refuse(source)
        if isinstance(p, Refusal):
            return p
        loops = [n for n in p.all(cst.For) + p.all(cst.While) if p.spans(n, target.line)]
        if not loops:
            return Refusal(f"no loop around line {target.line}")
        loop = max(loops, key=p.line)
        trains = contains_call(loop, TRAINING_CALLS)
        if trains is not None:
            return Refusal(
                f"the loop at line {p.line(loop)} trains (`{full_name(trains.func)}()` at line "
                f"{p.line(trains)}): not an evaluation loop"
            )
        mode = grad_context(p, loop)
        if mode == "enable_grad":
            return Refusal("the loop runs under torch.enable_grad(): gradients are wanted there")
        if mode in ("no_grad", "inference_mode"):
            return Refusal(f"the loop already runs under torch.{mode}()", already=True)
        if not p.in_block(loop):
            return Refusal("the loop shares a one-line block: not rewritten")
        torch = p.torch_name() or "torch"
        code = wrap(
            p,
            [loop],
            f"with {torch}.inference_mode():",
            "torchdoctor: no autograd history for a loop that never calls backward",
        )
        if p.torch_name() is None:
            code = ensure_import(code, "torch")
        return Rewrite(code, f"loop at line {p.line(loop)} under torch.inference_mode()")


CODEMOD = InferenceMode()
