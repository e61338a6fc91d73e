"""``graph-breaks``' fix: each break's line rewritten, in the user's own code, where a rewrite
keeps the graph whole; what to change there (advice, no code) where none is known.

Known rewrites (read from the script's source at the break's line):

- a host read assigned whole (``scale = t.item()``, ``torch.Tensor.item(t)``, ``w =
  t.tolist()``) keeps the value a tensor: ``scale = t.detach()``, unless the function then
  uses the value as a Python number (formatted, a branch, ``float()``, json, stored or returned
  for code the rewrite does not see, summed into an accumulator that is): then what to change
  and where, as advice;
- a branch on a tensor's value that only reassigns one name (``if h.mean() > 0.1: h = h * 0.5``)
  becomes ``h = torch.where(h.mean() > 0.1, h * 0.5, h)``.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchdoctor.rules.sites import relative_site

_READS = ("item", "tolist")
_WHY_READ = (
    "a tensor, not a number read on the host: no graph break (where Python numbers are "
    "needed, a size or a branch, read them outside the compiled function)"
)
_WHY_BRANCH = "both sides computed, the value picked on the device: no Python branch, no break"
_MOST = 4
"""Break sites given a line each; the rest are in the finding's ``where``."""


def graph_break_fix(breaks: Sequence[Mapping[str, Any]]) -> str:
    """The rewritten line for each break site (``compile.graph_breaks`` rows) that has a known
    rewrite, in place of that line; then, as comments, what to change at the others, and how
    to check that none is left."""
    code, advice = [], []
    for b in list({str(b["site"]): b for b in breaks}.values())[:_MOST]:
        where = relative_site(str(b["site"]))
        reason = str(b.get("reason") or "")
        new = _rewrite(str(b["site"]), reason)
        if new is not None:
            text, why = new
            if text is None:  # a rewrite the rest of the function would not take
                advice.append(f"# the line at {where} {why}")
            else:
                code.append(f"{text}  # in place of the line at {where}: {why}")
            continue
        reason = reason.split(". ")[0][:100]
        advice.append(
            f"# change the line at {where} so dynamo can trace it"
            + (f" ({reason})" if reason else "")
            + ": no print, .item(), numpy or branch on a tensor's value inside the compiled "
            "function, or move it out"
        )
    check = "# then pass fullgraph=True to the torch.compile call: it raises at any break left"
    return "\n".join([*code, *advice, check])


def _rewrite(site: str, reason: str) -> tuple[str | None, str] | None:
    """(the statement at ``site`` rewritten so that it does not break the graph, why), or
    (None, what to change first) for a read whose value the function needs as a number, or
    None when no rewrite is known or the source cannot be read. Only where dynamo's ``reason``
    says the break is what is rewritten: a scalar read (``.item()``, ``.tolist()``: a
    data-dependent operator), a branch (a jump on a tensor's value)."""
    path, _, line = site.rpartition(":")
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    if not line.isdigit():
        return None
    at = int(line)  # dynamo names the instruction's line: a statement may start above it
    spans = [n for n in ast.walk(tree) if isinstance(n, ast.stmt) and n.lineno <= at]
    spans = [n for n in spans if at <= (n.end_lineno or n.lineno)]
    stmt = min(spans, key=lambda n: (n.end_lineno or n.lineno) - n.lineno, default=None)
    why = reason.lower()
    scalar = any(w in why for w in ("item", "tolist", "scalar", "data dependent", "data-dependent"))
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and scalar:
        read = _read_of(stmt.value)
        if read is not None:
            needs = number_uses(tree, stmt)
            if needs:
                return None, _needs_advice(stmt, needs, path)
            stmt.value = ast.Call(ast.Attribute(read, "detach", ast.Load()), [], [])
            return ast.unparse(stmt), _WHY_READ
    branch = any(w in why for w in ("branch", "jump"))
    if isinstance(stmt, ast.If) and branch and not stmt.orelse and len(stmt.body) == 1:
        (body,) = stmt.body
        if (
            isinstance(body, ast.Assign)
            and len(body.targets) == 1
            and isinstance(body.targets[0], ast.Name)
        ):
            name = body.targets[0].id
            cond, value = ast.unparse(stmt.test), ast.unparse(body.value)
            return f"{name} = torch.where({cond}, {value}, {name})", _WHY_BRANCH
    return None


def _read_of(value: ast.expr) -> ast.expr | None:
    """The tensor ``value`` reads on the host when it is one whole read (``t.item()``,
    ``t.tolist()``, ``torch.Tensor.item(t)``), else None."""
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
        return None
    f = value.func
    if f.attr not in _READS or value.keywords:
        return None
    if not value.args:
        return f.value  # t.item()
    if len(value.args) == 1 and ast.unparse(f.value) in ("torch.Tensor", "Tensor"):
        return value.args[0]  # torch.Tensor.item(t)
    return None


_AS_NUMBER = frozenset(
    {"float", "int", "bool", "round", "str", "repr", "format", "print", "range"}
    | {"sum", "min", "max", "sorted", "list", "tuple", "set"}
)
"""Builtins that read their argument as a Python number or a list of them: given a tensor,
each reads it on the host again (the break moves there) or does something else (``print``
shows ``tensor(...)``)."""
_HOST_MODULES = frozenset({"json", "math", "np", "numpy", "statistics"})
_STORES = frozenset({"append", "extend", "insert", "add"})
_SIZES = frozenset({"view", "reshape", "expand", "repeat", "narrow", "zeros", "ones", "empty"})
"""Calls whose arguments are sizes (ints): a tensor there is read on the host."""


def number_uses(tree: ast.Module, stmt: ast.Assign) -> list[tuple[int, str]]:
    """(line, how) of each use, after ``stmt`` in the function that holds it (the module at top
    level), of the name ``stmt`` assigns as a Python number: formatted, tested by a branch,
    converted, a size or index, passed to json/math/numpy, or stored or returned for code not
    read here; through plain copies and ``+=`` accumulators. A target that is not a name
    (``self.x = ...``) is itself stored for code not read here."""
    funcs = [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.lineno <= stmt.lineno <= (n.end_lineno or n.lineno)
    ]
    scope: ast.AST = max(funcs, key=lambda n: n.lineno, default=tree)
    parents = {c: p for p in ast.walk(scope) for c in ast.iter_child_nodes(p)}
    (target,) = stmt.targets
    names = target.elts if isinstance(target, ast.Tuple) else [target]
    found: set[tuple[int, str]] = set()
    for t in names:
        if isinstance(t, ast.Name):
            found.update(_uses(scope, parents, t.id, stmt.end_lineno or stmt.lineno, 0))
        else:
            found.add((stmt.lineno, f"stored in {ast.unparse(t)}, read by code not seen here"))
    return sorted(found)


def _uses(
    scope: ast.AST, parents: Mapping[ast.AST, ast.AST], name: str, after: int, depth: int
) -> list[tuple[int, str]]:
    """``number_uses`` of ``name`` from the line after ``after`` to its next assignment."""
    nodes = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name]
    for g in ast.walk(scope):
        if isinstance(g, (ast.Global, ast.Nonlocal)) and name in g.names:
            return [(g.lineno, f"kept in {name} outside the function")]
    stores = [n.lineno for n in nodes if isinstance(n.ctx, ast.Store) and n.lineno > after]
    until = min(stores, default=10**9)
    out: list[tuple[int, str]] = []
    for n in nodes:
        if not (isinstance(n.ctx, ast.Load) and after < n.lineno <= until):
            continue
        how = _how(n, parents)
        if isinstance(how, str):
            out.append((n.lineno, how))
        elif how is not None and depth < 2:  # a copy or an accumulator: its uses count too
            out.extend(_uses(scope, parents, how.id, n.lineno, depth + 1))
    return out


def _how(node: ast.Name, parents: Mapping[ast.AST, ast.AST]) -> str | ast.Name | None:
    """How the use ``node`` needs a Python number (a phrase), the name it is copied or added
    into (``y = x``, ``total += x``), or None when a tensor serves as well there. Formatting,
    conversions, sizes and branches see through arithmetic (``f"{x * 2}"``); a value returned
    or stored does not (``return h * x`` is a tensor when ``h`` is one)."""
    top: ast.AST = node
    while isinstance(parents.get(top), (ast.BinOp, ast.UnaryOp)) and not _formats(parents[top]):
        top = parents[top]
    up = parents.get(top)
    if isinstance(up, ast.FormattedValue) or _formats(up):
        return "formatted"
    if isinstance(up, ast.Call) and top is not up.func:
        return _call_use(up.func)
    if isinstance(up, (ast.Slice, ast.Subscript)) and top is not getattr(up, "value", None):
        return "an index"
    p = parents.get(node)
    if isinstance(p, (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Return, ast.Yield)):
        return "returned" if isinstance(p, (ast.Return, ast.Yield)) else "put in a container"
    if isinstance(p, (ast.Assign, ast.AugAssign)) and node is p.value:
        targets = p.targets if isinstance(p, ast.Assign) else [p.target]
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            return targets[0]
        return f"stored in {ast.unparse(targets[0])}"
    return "a branch" if _in_test(node, parents) else None


def _formats(node: ast.AST | None) -> bool:
    """Whether ``node`` is ``"..." % value``."""
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Mod)
        and isinstance(node.left, ast.Constant)
        and isinstance(node.left.value, str)
    )


def _call_use(func: ast.expr) -> str | None:
    """How a call ``func(..., x, ...)`` uses ``x`` as a number, or None (a tensor serves)."""
    if isinstance(func, ast.Name):
        return f"{func.id}()" if func.id in _AS_NUMBER else None
    if not isinstance(func, ast.Attribute):
        return None
    if isinstance(func.value, ast.Name) and func.value.id in _HOST_MODULES:
        return f"{func.value.id}.{func.attr}()"
    if func.attr in _STORES:
        return f"stored with .{func.attr}()"
    if func.attr == "format" and isinstance(func.value, ast.Constant):
        return "formatted"
    return "a size" if func.attr in _SIZES else None


def _in_test(node: ast.AST, parents: Mapping[ast.AST, ast.AST]) -> bool:
    """Whether ``node`` is inside the test of an ``if``, ``while``, ``assert``, a conditional
    expression or a comprehension's ``if``: a branch taken on the host."""
    child, p = node, parents.get(node)
    while p is not None:
        if isinstance(p, (ast.If, ast.While, ast.IfExp, ast.Assert)) and child is p.test:
            return True
        if isinstance(p, ast.comprehension) and child in p.ifs:
            return True
        if isinstance(p, ast.stmt):
            return False
        child, p = p, parents.get(p)
    return False


def _needs_advice(stmt: ast.Assign, needs: Sequence[tuple[int, str]], path: str) -> str:
    """What to change before the read at ``stmt`` can stay a tensor (``graph_break_fix``)."""
    name = ast.unparse(stmt.targets[0])
    uses = ", ".join(f"{relative_site(f'{path}:{line}')} ({how})" for line, how in needs[:3])
    more = f" and {len(needs) - 3} more" if len(needs) > 3 else ""
    return (
        f"reads {name} on the host, and {name} is then used as a Python number at {uses}"
        f"{more}: a tensor there would change what that code does or break the graph again. "
        "Move those uses after the compiled call (return the tensor, read the number there), "
        f"then {name} can stay a tensor at this line (.detach() in place of the read)"
    )
