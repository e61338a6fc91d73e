"""A fix is code only where its names are the script's: a statement of a fix that reads a name
the user's code never binds where the fix points (``array``, ``snapshot``, ``ema_params``,
``dataset``, ``step``) is a pattern, not code to paste, and is printed as a comment.

The scope read is the file the fix points at (``# at FILE:LINE``), the names bound in the
functions around that line and at module level; without a place, every name the script binds
anywhere. Builtins count as bound. A fix that does not parse as Python (a shell command) is
left as it is.
"""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
from pathlib import Path

_AT = re.compile(
    r"(?:#\s*(?:at|now at)|in place of the line at)\s+(?P<path>\S+?\.py):(?P<line>\d+)"
)
_BUILTINS = frozenset(dir(builtins))


def _bound(node: ast.AST) -> set[str]:
    """Names a node binds: assignments, loop and with targets, imports, functions, classes,
    parameters."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del):
            out.add(n.id)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(n.name)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
    return out


def _module_level(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(stmt.name)
        else:
            out |= _bound(stmt)
    return out


def names_in_scope(source: str, line: int | None) -> set[str]:
    """Names the code at ``line`` can read: module level and every function around it (the
    whole file's names when ``line`` is None)."""
    tree = ast.parse(source)
    if line is None:
        return _bound(tree)
    out = _module_level(tree)
    for n in ast.walk(tree):
        end = getattr(n, "end_lineno", None) or 0
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.lineno <= line <= end:
            out |= _bound(n)
    return out


def _free(stmt: ast.stmt, own: set[str]) -> set[str]:
    loads = {
        n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    return loads - own - _BUILTINS


def fit_names(fix: str, script: str | None) -> str:
    """``fix`` with each statement whose names the user's code lacks turned into a comment."""
    if not script or not fix.strip():
        return fix
    at = _AT.search(fix)
    path, line = (Path(at.group("path")), int(at.group("line"))) if at else (Path(script), None)
    if not path.is_absolute():
        path = Path(script).parent / path
    try:
        scope = names_in_scope(path.read_text(encoding="utf-8"), line)
        lines = fix.splitlines()
        code_rows = [
            i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")
        ]
        if not code_rows:
            return fix
        code = textwrap.dedent("\n".join(lines[i] for i in code_rows))
        tree = ast.parse(code)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return fix
    own: set[str] = set()  # names the fix's earlier statements bind (a new loader)
    unfit: set[int] = set()
    for stmt in tree.body:
        inner = _bound(stmt) if isinstance(stmt, ast.For | ast.With | ast.If) else set()
        if _free(stmt, own | inner) - scope:
            unfit |= set(range(stmt.lineno - 1, (stmt.end_lineno or stmt.lineno)))
        else:  # a commented statement binds nothing for the ones after it
            own |= _bound(stmt)
    if not unfit:
        return fix
    for k in sorted(unfit):
        i = code_rows[k]
        lines[i] = "# " + lines[i]
    return "\n".join(lines)
