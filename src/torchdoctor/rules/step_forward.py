"""The training step's forward as the script writes it, read with ``ast``: the statements that
compute the loss whose ``.backward()`` is called and the device the step copies its batch to.

The same definition as ``fix``'s ``bf16-autocast`` codemod (``fix/codemods/precision.py``): in
the block of the backward, the statements before it up to the last one that assigns the loss,
back to the batch's copy (``x, y = x.to(device), y.to(device)``), a ``zero_grad``/``backward``/
``step`` call or a compound statement; the device is the one expression every such copy names
(``device``, ``args.device``), so a printed autocast runs where the script runs.
"""

from __future__ import annotations

import ast
import linecache
import textwrap
from dataclasses import dataclass

_MOVES = ("to", "cuda", "pin_memory")
_STEP_CALLS = ("zero_grad", "backward", "step")


@dataclass(frozen=True)
class StepForward:
    """The forward and loss of the step whose backward the script calls once."""

    site: str
    """``file:line`` of the first statement."""
    code: str
    """Those statements' source, dedented."""
    device: str | None
    """The expression the batch copies before them name (``device``), None when none or two."""


def _dotted(e: ast.expr | None) -> str | None:
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute):
        base = _dotted(e.value)
        return f"{base}.{e.attr}" if base else None
    return None


def _values(stmt: ast.stmt) -> list[ast.expr]:
    if not isinstance(stmt, ast.Assign):
        return []
    v = stmt.value
    return list(v.elts) if isinstance(v, ast.Tuple) else [v]


def _only_moves(stmt: ast.stmt) -> bool:
    """``x, y = x.to(device), y.to(device)``: copying the batch, not computing on it."""
    vals = _values(stmt)
    return bool(vals) and all(
        isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _MOVES
        for e in vals
    )


def _calls(stmt: ast.stmt, names: tuple[str, ...]) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in names
        for n in ast.walk(stmt)
    )


def _loss(stmt: ast.stmt) -> str | None:
    """``loss`` of ``loss.backward()`` and of ``scaler.scale(loss).backward()``."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return None
    func = stmt.value.func
    if not (isinstance(func, ast.Attribute) and func.attr == "backward"):
        return None
    obj = func.value
    if isinstance(obj, ast.Call) and isinstance(obj.func, ast.Attribute) and obj.args:
        obj = obj.args[0] if obj.func.attr == "scale" else obj
    return obj.id if isinstance(obj, ast.Name) else None


def _assigns(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, ast.Assign):
        return any(
            name in {n.id for n in ast.walk(t) if isinstance(n, ast.Name)} for t in stmt.targets
        )
    return isinstance(stmt, ast.AnnAssign | ast.AugAssign) and _dotted(stmt.target) == name


def _device(copies: list[ast.stmt], torch: str) -> str | None:
    found = set()
    for stmt in copies:
        for call in _values(stmt) if _only_moves(stmt) else ():
            assert isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            arg = call.args[0] if call.args else None
            arg = next((k.value for k in call.keywords if k.arg == "device"), arg)
            name = _dotted(arg)
            if call.func.attr == "to" and name and not name.startswith(torch + "."):
                found.add(name)  # not a dtype: torch.float32
    return found.pop() if len(found) == 1 else None


def _blocks(tree: ast.Module) -> list[list[ast.stmt]]:
    return [
        block
        for node in ast.walk(tree)
        for name in ("body", "orelse", "finalbody")
        if isinstance(block := getattr(node, name, None), list) and block
        if isinstance(block[0], ast.stmt)
    ]


def step_forward(script: str | None) -> StepForward | None:
    """The forward of the script's one ``loss.backward()`` (see the module's docstring); None
    when the script cannot be read or parsed, calls no backward or more than one, or computes
    the loss in another block."""
    lines = linecache.getlines(script) if script else []
    source = "".join(lines)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    found = [(b, k) for b in _blocks(tree) for k, s in enumerate(b) if _loss(s)]
    if len(found) != 1:
        return None
    block, i = found[0]
    loss = _loss(block[i])
    assert loss is not None
    last = next((k for k in range(i - 1, -1, -1) if _assigns(block[k], loss)), None)
    if last is None:
        return None
    first = last
    simple = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr)
    while first > 0:
        prev = block[first - 1]
        if not isinstance(prev, simple) or _only_moves(prev) or _calls(prev, _STEP_CALLS):
            break
        first -= 1
    start, end = block[first].lineno, block[last].end_lineno or block[last].lineno
    code = textwrap.dedent("".join(lines[start - 1 : end])).rstrip("\n")
    torch = next(
        (
            a.asname or a.name
            for n in ast.walk(tree)
            if isinstance(n, ast.Import)
            for a in n.names
            if a.name == "torch"
        ),
        "torch",
    )
    return StepForward(f"{script}:{start}", code, _device(block[:first], torch))
