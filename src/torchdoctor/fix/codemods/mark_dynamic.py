"""``mark-dynamic``: ``torch._dynamo.mark_dynamic(x, d)`` before each call of the compiled model,
on the argument and dimension the recompile guard names.

check records each recompile's failing guard (``tensor 'tokens' size mismatch at index 1``) and
the compiled function's ``def`` line. The guard's ``tokens`` is that function's parameter: its
position in the signature (``self`` dropped for a method) picks the argument at each call of
the compiled object (``compiled = torch.compile(model)``, ``model.compile()`` or a function
decorated with ``@torch.compile``). Those calls are the ones ``check``'s report prints the line
before (``rules/call_sites.py`` finds both); libcst only edits the statement at each. Refused
when the argument is computed inside the call, when the compiled object is not one name, or when
the dimension took size 0 or 1 (dynamo specialises those sizes, and ``mark_dynamic`` would
raise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import libcst as cst

from torchdoctor.fix.codemods.base import located, parse_or_refuse
from torchdoctor.fix.cst_tools import ensure_import, insert_before, statement, with_comment
from torchdoctor.fix.model import FindingRef, Refusal, Rewrite, Target
from torchdoctor.rules import call_sites

if TYPE_CHECKING:
    from torchdoctor.fix.context import FixContext


def changed_dims(
    finding: FindingRef, ctx: FixContext
) -> dict[tuple[str, str, str, int], list[int]]:
    """(function, def site, tensor, dim) -> sizes seen, from the run's recompile events (or
    the finding's guard reasons when only those are known): ``call_sites.guarded_dims``."""
    rows: list[call_sites.GuardRow] = [
        (e.function, e.site, d) for e in ctx.record.compile.recompile_events for d in e.changed_dims
    ]
    if not rows:  # the finding's own evidence: its guard reasons and where they were
        from torchdoctor.capture.compile_watch import guard_dims

        site = next((w.split(" (")[0] for w in finding.where), "")
        fn = next((w.split(" (")[1].rstrip(")") for w in finding.where if " (" in w), "")
        reasons = finding.evidence.get("reasons") or []
        rows = [(fn, site, d) for r in reasons for d in guard_dims(str(r))]
    return call_sites.guarded_dims(rows, ctx.site)


def argument_at_calls(
    ctx: FixContext, function: str, site: str, name: str
) -> list[tuple[str, int, str] | Refusal]:
    """Each call of the compiled ``function`` (its ``def`` at ``site``) in the user's files, as
    (file, line of the call, the user's expression passed for ``name``): ``name`` is one of
    the function's parameters, or a chain from one (``batch.input_ids``, ``xs[0]``); or the
    refusal that says why a call (or every call) cannot be named."""
    where = located(ctx, site)
    if isinstance(where, Refusal):
        return [where]
    found = call_sites.signature(where[0], function, where[1])
    if found is None:
        return [Refusal(f"cannot find the compiled function {function or '?'} at {site}")]
    calls = call_sites.calls_passing(ctx.files(), found[1], name)
    if calls is None:
        return [Refusal(f"`{name}` is not an argument of {found[0]}()")]
    return [
        Refusal(
            f"the argument `{c.expr}` is computed inside the call: assign it to a name first",
            c.path,
            c.line,
        )
        if c.computed
        else (c.path, c.line, c.expr)
        for c in calls
    ] or [Refusal(f"no call of the compiled {found[0]} found in the user's files")]


class MarkDynamic:
    id = "mark-dynamic"
    title = "torch._dynamo.mark_dynamic on the dimension a recompile guard names"
    precision = "fp32"

    def plan(self, finding: FindingRef, ctx: FixContext) -> list[Target | Refusal]:
        dims = changed_dims(finding, ctx)
        if not dims:
            return [Refusal("no guard named a tensor's size: keep the guarded values constant")]
        out: list[Target | Refusal] = []
        for (function, site, tensor, dim), sizes in dims.items():
            out += self._plan_one(ctx, function, site, tensor, dim, sizes)
        return out

    def _plan_one(
        self, ctx: FixContext, function: str, site: str, tensor: str, dim: int, sizes: list[int]
    ) -> list[Target | Refusal]:
        if any(s <= 1 for s in sizes):
            return [
                Refusal(
                    f"dim {dim} of `{tensor}` took size {min(sizes)}: dynamo specialises sizes 0 and 1, so mark_dynamic would raise"
                )
            ]
        shown = ", ".join(str(s) for s in sizes[:4]) + (", ..." if len(sizes) > 4 else "")
        return [
            Target(self.id, c[0], c[1], {"expr": c[2], "dim": dim, "sizes": shown})
            if isinstance(c, tuple)
            else c
            for c in argument_at_calls(ctx, function, site, tensor)
        ]

    def rewrite(self, source: str, target: Target) -> Rewrite | Refusal:
        p = parse_or_refuse(source)
        if isinstance(p, Refusal):
            return p
        stmts = [
            s for s in p.all(cst.SimpleStatementLine) if p.spans(s, target.line) and p.in_block(s)
        ]
        if not stmts:
            return Refusal(f"no statement at line {target.line}")
        stmt = max(stmts, key=p.line)
        expr, dim = target.params["expr"], target.params["dim"]
        torch = p.torch_name() or "torch"
        text = f"{torch}._dynamo.mark_dynamic({expr}, {dim})"
        block: Any = p.parent[stmt]
        body: list[Any] = list(block.body)
        i = next(k for k, s in enumerate(body) if s is stmt)
        if (
            i
            and "mark_dynamic(" in p.code_of(body[i - 1])
            and f"({expr}, {dim})" in p.code_of(body[i - 1])
        ):
            return Refusal(f"mark_dynamic({expr}, {dim}) is already there", already=True)
        new = with_comment(
            statement(text + "\n"),  # type: ignore[arg-type]
            f"torchdoctor: dim {dim} takes sizes {target.params['sizes']}: one dynamic graph",
        )
        code = insert_before(p, stmt, [new])
        if p.torch_name() is None:
            code = ensure_import(code, "torch")
        return Rewrite(code, f"mark_dynamic({expr}, {dim})")


CODEMOD = MarkDynamic()
