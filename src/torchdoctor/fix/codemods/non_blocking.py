"""``non-blocking-copies``: ``non_blocking=True`` on the host-to-device copies of batches from a
pinned loader, so the copy overlaps the previous step's kernels.

Only on a CUDA run, and only for a loader that is (or the same patch makes it) pinned: from
pageable memory a non-blocking copy is synchronous anyway. The copies are the ``.to(...)`` /
``.cuda()`` calls on the loop variables of a ``for`` over the loader (``enumerate(loader)``,
``tqdm(loader)``): the first of each variable only, the batch's copy from the host; a later
``.to(...)`` of the same name may copy a device result back, and a non-blocking copy to the
host is read before it lands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdoctor.fix.codemods.base import located, parse_or_refuse
from torchdoctor.fix.codemods.dataloader import is_loader_call, loader_record, wanted
from torchdoctor.fix.cst_tools import (
    Parsed,
    arg_index,
    full_name,
    innermost_spanning,
    literal,
    set_args,
)
from torchdoctor.fix.model import FindingRef, Refusal, Rewrite, Target

if TYPE_CHECKING:
    from torchdoctor.fix.context import FixContext


_WRAPPERS = ("enumerate", "tqdm", "tqdm.tqdm", "iter")
"""Calls whose items are their first argument's: ``for i, b in enumerate(tqdm(loader))``."""


def _iterated_name(node: cst.BaseExpression) -> str:
    """``loader`` for ``for b in loader`` and ``for i, b in enumerate(loader)``."""
    while isinstance(node, cst.Call) and full_name(node.func) in _WRAPPERS and node.args:
        node = node.args[0].value
    return full_name(node)


def target_names(t: cst.CSTNode) -> set[str]:
    """The names an assignment or ``for`` target binds: ``{"x", "y"}`` for ``i, (x, y)``."""
    if isinstance(t, cst.Name):
        return {t.value}
    if isinstance(t, cst.Tuple | cst.List):
        return set().union(*(target_names(e.value) for e in t.elements))
    return set()


def batch_copies(loop: cst.For) -> list[cst.Call]:
    """The first ``x.to(device)`` / ``x.cuda()`` call on each of the loop's variables inside its
    body (not one to the CPU, nor one that passes ``non_blocking`` by position)."""
    names = target_names(loop.target)
    found: list[cst.Call] = []

    class _V(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            f = n.func
            if not (isinstance(f, cst.Attribute) and f.attr.value in ("to", "cuda")):
                return
            if full_name(f.value) not in names:
                return
            names.discard(full_name(f.value))  # a later copy of the name is no batch copy
            first = literal(n.args[0].value) if n.args else None
            if isinstance(first, str) and first.startswith("cpu"):
                return
            if any(a.keyword is None and isinstance(literal(a.value), bool) for a in n.args):
                return  # x.cuda(0, True): non_blocking given by position
            found.append(n)

    loop.body.visit(_V())
    return found


def _loader_name(p: Parsed, line: int) -> str | None:
    call = innermost_spanning(p, [c for c in p.all(cst.Call) if is_loader_call(p, c)], line)
    stmt = p.statement(call) if call is not None else None
    if not isinstance(stmt, cst.SimpleStatementLine):
        return None
    assign = stmt.body[0]
    if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
        return full_name(assign.targets[0].target) or None
    if isinstance(assign, cst.AnnAssign):
        return full_name(assign.target) or None
    return None


class NonBlockingCopies:
    id = "non-blocking-copies"
    title = "non_blocking=True on copies of pinned batches"
    precision = "fp32"

    def plan(self, finding: FindingRef, ctx: FixContext) -> list[Target | Refusal]:
        loader = loader_record(finding, ctx)
        pinned = loader.pin_memory or "pin_memory" in wanted(finding, loader, ctx)
        if not ctx.cuda or not pinned:
            return []  # nothing to overlap with: no GPU, or the batches stay pageable
        site = loader.call.site if loader.call is not None else ""
        if not site:
            return [
                Refusal("no DataLoader call recorded: cannot tell which loop copies its batches")
            ]
        where = located(ctx, str(site))
        if isinstance(where, Refusal):
            return [where]
        p = ctx.parsed(where[0])
        name = _loader_name(p, where[1]) if p is not None else None
        if not name:
            return [Refusal("the DataLoader is not assigned to a name: cannot find its loop")]
        targets: list[Target | Refusal] = []
        for f in ctx.files():
            q = ctx.parsed(f)
            for loop in q.all(cst.For) if q is not None else []:
                if _iterated_name(loop.iter) == name and batch_copies(loop):
                    targets.append(Target(self.id, f, q.line(loop), {"loader": name}))  # type: ignore[union-attr]
        return targets or [Refusal(f"no copy of the batches of `{name}` to the device found")]

    def rewrite(self, source: str, target: Target) -> Rewrite | Refusal:
        p = parse_or_refuse(source)
        if isinstance(p, Refusal):
            return p
        loop = next((f for f in p.all(cst.For) if p.line(f) == target.line), None)
        if loop is None:
            return Refusal(f"no for loop at line {target.line}")
        todo = [c for c in batch_copies(loop) if arg_index(c, "non_blocking") is None]
        if not todo:
            return Refusal("the batch copies are already non_blocking", already=True)
        names = ", ".join(sorted({full_name(c.func) for c in todo}))
        repl = {c: set_args(c, {"non_blocking": "True"}) for c in todo}
        return Rewrite(p.replace_many(repl), f"non_blocking=True on {names}")


CODEMOD = NonBlockingCopies()
