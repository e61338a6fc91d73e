"""``mark-dynamic``: ``torch._dynamo.mark_dynamic(x, d)`` before each call of the compiled model,
on the argument and dimension the recompile guard names.

check records each recompile's failing guard (``tensor 'tokens' size mismatch at index 1``) and
the compiled function's ``def`` line. The guard's ``tokens`` is that function's parameter: its
position in the signature (``self`` dropped for a method) picks the argument at each call of
the compiled object (``compiled = torch.compile(model)``, ``model.compile()`` or a function
decorated with ``@torch.compile``). Refused when the argument is computed inside the call,
when the compiled object is not one name, or when the dimension took size 0 or 1 (dynamo
specialises those sizes, and ``mark_dynamic`` would raise).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import libcst as cst

from torchdoctor.fix.codemods.base import located, parse_or_refuse
from torchdoctor.fix.cst_tools import (
    Parsed,
    ensure_import,
    full_name,
    insert_before,
    statement,
    with_comment,
)
from torchdoctor.fix.model import FindingRef, Refusal, Rewrite, Target
from torchdoctor.fix.sources import parse_site
from torchdoctor.rules.call_sites import TENSOR_CHAIN, local_name

if TYPE_CHECKING:
    from torchdoctor.fix.context import FixContext

_GUARD = re.compile(
    r"tensor '(?P<name>.+?)' (?:size|stride) mismatch at index (?P<dim>\d+)\. "
    r"expected (?P<expected>\d+), actual (?P<actual>\d+)"
)


def changed_dims(
    finding: FindingRef, ctx: FixContext
) -> dict[tuple[str, str, str, int], list[int]]:
    """(function, def site, tensor, dim) -> sizes seen, from the run's recompile events (or
    the finding's guard reasons when only those are known). Events whose frame dynamo did not
    name (``?:0``) add their sizes to the same tensor's named function."""
    events = ctx.record.compile.recompile_events
    rows = [
        (e.function, e.site, str(d["tensor"]), int(d["dim"]), d)
        for e in events
        for d in e.changed_dims
    ]
    if not rows:
        rows = _from_reasons(finding)
    named = {(t, dim): (fn, site) for fn, site, t, dim, _ in rows if parse_site(site)}
    out: dict[tuple[str, str, str, int], list[int]] = {}
    for fn, site, tensor, dim, d in rows:
        fn, site = named.get((tensor, dim), (fn, site))
        sizes = out.setdefault((fn, site, tensor, dim), [])
        sizes += [int(s) for s in (d["expected"], d["actual"]) if int(s) not in sizes]
    return out


def _from_reasons(finding: FindingRef) -> list[tuple[str, str, str, int, dict[str, Any]]]:
    site = next((w.split(" (")[0] for w in finding.where), "")
    fn = next((w.split(" (")[1].rstrip(")") for w in finding.where if " (" in w), "")
    rows = []
    for reason in finding.evidence.get("reasons") or []:
        for m in _GUARD.finditer(str(reason)):
            name = local_name(m.group("name"))
            d = {"expected": m.group("expected"), "actual": m.group("actual")}
            rows.append((fn, site, name, int(m.group("dim")), d))
    return rows


def _params(p: Parsed, fdef: cst.FunctionDef) -> list[str]:
    names = [x.name.value for x in (*fdef.params.posonly_params, *fdef.params.params)]
    if p.enclosing(fdef, (cst.ClassDef, cst.FunctionDef)).__class__ is cst.ClassDef and names:
        names = names[1:]  # a method: self is bound
    return names


def _compiled_names(p: Parsed) -> set[str]:
    """Names bound to compiled code: ``c = torch.compile(...)``, ``m.compile()``, ``@torch.compile``."""
    names: set[str] = set()
    for stmt in p.all(cst.Assign):
        v = stmt.value
        if isinstance(v, cst.Call) and "torch.compile" in p.qualified(v) and len(stmt.targets) == 1:
            names.add(full_name(stmt.targets[0].target))
    for c in p.all(cst.Call):
        f = c.func
        if (
            isinstance(f, cst.Attribute)
            and f.attr.value == "compile"
            and "torch.compile" not in p.qualified(c)
        ) and isinstance(f.value, cst.Name):
            names.add(f.value.value)
    for fdef in p.all(cst.FunctionDef):
        for d in fdef.decorators:
            e = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
            if "torch.compile" in p.qualified(e) or full_name(e).endswith("torch.compile"):
                names.add(fdef.name.value)
    return {n for n in names if n}


def _simple(expr: cst.BaseExpression) -> bool:
    """A name, attribute or subscript chain: the same object mark_dynamic marks."""
    while isinstance(expr, cst.Attribute | cst.Subscript):
        expr = expr.value
    return isinstance(expr, cst.Name)


def _call_arg(call: cst.Call, index: int, name: str) -> cst.BaseExpression | None:
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if index < len(positional):
        return positional[index].value
    return next((a.value for a in call.args if a.keyword and a.keyword.value == name), None)


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
    p = ctx.parsed(where[0])
    if p is None:
        return [Refusal(f"{ctx.rel(where[0])} does not parse")]
    fdef = next(
        (
            f
            for f in p.all(cst.FunctionDef)
            if p.spans(f, where[1]) and f.name.value == (function or f.name.value)
        ),
        None,
    )
    m = TENSOR_CHAIN.match(name)
    if fdef is None or m is None:
        return [Refusal(f"cannot find the compiled function {function or '?'} at {site}")]
    params = _params(p, fdef)
    if m.group("base") not in params:
        return [Refusal(f"`{name}` is not an argument of {fdef.name.value}()")]
    index = params.index(m.group("base"))
    out: list[tuple[str, int, str] | Refusal] = []
    for f in ctx.files():
        q = ctx.parsed(f)
        if q is None:
            continue
        names = _compiled_names(q)
        for call in q.all(cst.Call):
            if not (isinstance(call.func, cst.Name) and call.func.value in names):
                continue
            arg = _call_arg(call, index, m.group("base"))
            if arg is None:
                continue
            if not _simple(arg):
                out.append(
                    Refusal(
                        f"the argument `{q.code_of(arg)}` is computed inside the call: assign it to a name first",
                        f,
                        q.line(call),
                    )
                )
                continue
            out.append((f, q.line(call), q.code_of(arg) + m.group("rest")))
    return out or [Refusal(f"no call of the compiled {fdef.name.value} found in the user's files")]


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
