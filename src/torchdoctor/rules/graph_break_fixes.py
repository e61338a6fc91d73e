"""``graph-breaks``' fix: each break's line rewritten, in the user's own code, where a rewrite
keeps the graph whole; what to change there (advice, no code) where none is known.

Known rewrites (read from the script's source at the break's line):

- a host read assigned whole (``scale = t.item()``, ``torch.Tensor.item(t)``, ``w =
  t.tolist()``) keeps the value a tensor: ``scale = t.detach()``;
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


def _rewrite(site: str, reason: str) -> tuple[str, str] | None:
    """(the statement at ``site`` rewritten so that it does not break the graph, why), or None
    when no rewrite is known or the source cannot be read. Only where dynamo's ``reason`` says
    the break is what is rewritten: a scalar read (``.item()``, ``.tolist()``: a data-dependent
    operator), a branch (a jump on a tensor's value)."""
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
