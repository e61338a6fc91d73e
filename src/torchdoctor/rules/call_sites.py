"""Where the user's code calls a compiled function with the argument a recompile guard named:
the place check's recompile fixes print (``mark_dynamic`` and a guarded value's tensor form run
before the call; inside the compiled function dynamo rejects the one and compiles in the other).

Read with ``ast`` from the script and the file of the compiled function's ``def``: the guard's
name (``tokens``) is a parameter of that function; its position in the signature (``self``
dropped for a method) picks the argument at each call of a name bound to compiled code
(``c = torch.compile(...)``, ``m.compile()``, ``@torch.compile``). An argument computed inside
the call (not a name, attribute or subscript chain) is not named. ``fix``'s mark-dynamic codemod
takes its dimensions from :func:`guarded_dims` and its places from :func:`signature` and
:func:`calls_passing`, and edits the line each names."""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord

TENSOR_CHAIN = re.compile(r"^(?P<base>[A-Za-z_]\w*)(?P<rest>(\[[^\]]+\]|\.\w+)*)$")
"""A guard's name as a parameter and a chain from it (``batch.input_ids``, ``xs[0]``)."""
DYNAMO_LOCAL = re.compile(r"""^L\[['"](?P<name>\w+)['"]\]""")
"""Dynamo's spelling of a frame local in a guard (``L['tokens']``)."""
_SITE = re.compile(r"^(?P<path>.+?):(?P<line>\d+)(?: \(.*\))?$")


def local_name(name: str) -> str:
    """``tokens`` from dynamo's ``L['tokens']`` (and any chain after it)."""
    m = DYNAMO_LOCAL.match(name)
    return m.group("name") + name[m.end() :] if m else name


def _path(site: str, bases: tuple[str, ...]) -> tuple[str, int] | None:
    m = _SITE.match(site.strip())
    if not m or m.group("path").startswith(("<", "?")) or int(m.group("line")) < 1:
        return None
    path = m.group("path")
    for p in [path] if os.path.isabs(path) else [os.path.join(b, path) for b in bases]:
        if os.path.isfile(p):
            return p, int(m.group("line"))
    return None


Trees = dict[str, tuple[ast.Module, str] | None]
"""Files read and parsed once per search: path -> (tree, text), None when unreadable."""


@dataclass(frozen=True)
class Call:
    """A call of compiled code that passes a guarded parameter."""

    path: str
    line: int
    """The call's first line."""
    expr: str
    """The user's expression passed there, with the guard's chain after it (``batch.input_ids``);
    for a computed argument, the argument as written."""
    computed: bool = False
    """The argument is computed inside the call (``tokens.long()``): nothing to mark before it."""


def _tree(path: str, cache: Trees) -> tuple[ast.Module, str] | None:
    if path not in cache:
        try:
            text = Path(path).read_text(encoding="utf-8")
            cache[path] = (ast.parse(text), text)
        except (OSError, SyntaxError, ValueError):
            cache[path] = None
    return cache[path]


def _dotted(e: ast.expr) -> str:
    parts = []
    while isinstance(e, ast.Attribute):
        parts.append(e.attr)
        e = e.value
    if isinstance(e, ast.Name):
        parts.append(e.id)
    return ".".join(reversed(parts))


def _torch_compile_names(tree: ast.Module) -> set[str]:
    """The dotted names that mean ``torch.compile`` in this file (``torch.compile``, ``t.compile``
    after ``import torch as t``, ``compile`` after ``from torch import compile``)."""
    names = {"torch.compile"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {f"{a.asname}.compile" for a in node.names if a.name == "torch" and a.asname}
        elif isinstance(node, ast.ImportFrom) and node.module == "torch":
            names |= {a.asname or a.name for a in node.names if a.name == "compile"}
    return names


def _compiled_names(tree: ast.Module) -> set[str]:
    """Names bound to compiled code: ``c = torch.compile(...)``, ``m.compile()``, ``@torch.compile``."""
    tc = _torch_compile_names(tree)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            v = node.value
            if isinstance(v, ast.Call) and _dotted(v.func) in tc:
                names.add(_dotted(node.targets[0]))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr == "compile" and isinstance(f.value, ast.Name) and _dotted(f) not in tc:
                names.add(f.value.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for d in node.decorator_list:
                if _dotted(d.func if isinstance(d, ast.Call) else d) in tc:
                    names.add(node.name)
    return {n for n in names if n}


def _defs(
    node: ast.AST, in_class: bool = False
) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
    """Every ``def`` under ``node``, outermost first, and whether a class body holds it."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield child, in_class
            yield from _defs(child, False)
        else:
            yield from _defs(child, isinstance(child, ast.ClassDef) or in_class)


def signature(
    path: str, function: str, line: int, cache: Trees | None = None
) -> tuple[str, list[str]] | None:
    """(name, the parameters callers pass) of the function ``function`` (any name when empty)
    whose ``def``, decorators included, spans ``line`` of ``path`` (``self`` dropped for a
    method); None when the file does not parse or holds no such function."""
    parsed = _tree(path, {} if cache is None else cache)
    for node, in_class in _defs(parsed[0]) if parsed else ():
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        if node.name == (function or node.name) and first <= line <= (node.end_lineno or line):
            names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
            return node.name, names[1:] if in_class and names else names
    return None


def _simple(e: ast.expr) -> bool:
    """A name, attribute or subscript chain: the same object mark_dynamic marks."""
    while isinstance(e, ast.Attribute | ast.Subscript):
        e = e.value
    return isinstance(e, ast.Name)


def _argument(call: ast.Call, index: int, name: str) -> ast.expr | None:
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    if index < len(positional) and len(positional) == len(call.args):
        return positional[index]
    return next((k.value for k in call.keywords if k.arg == name), None)


def calls_passing(
    files: Iterable[str], params: list[str], name: str, cache: Trees | None = None
) -> list[Call] | None:
    """Each call of compiled code in ``files`` (in file order, then line) that passes the
    parameter ``name`` is a chain from (``batch.input_ids``, ``xs[0]``); None when ``name`` is
    no chain from one of ``params``."""
    m = TENSOR_CHAIN.match(name)
    if m is None or m.group("base") not in params:
        return None
    cache = {} if cache is None else cache
    index, out = params.index(m.group("base")), []
    for f in files:
        parsed = _tree(f, cache)
        if parsed is None:
            continue
        tree, text = parsed
        compiled = _compiled_names(tree)
        calls = [
            c
            for c in ast.walk(tree)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in compiled
        ]
        for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
            arg = _argument(call, index, m.group("base"))
            if arg is None:
                continue
            expr = ast.get_source_segment(text, arg) or ""
            if _simple(arg):
                out.append(Call(f, call.lineno, expr + m.group("rest")))
            else:
                out.append(Call(f, call.lineno, expr, computed=True))
    return out


GuardRow = tuple[str, str, Mapping[str, Any]]
"""(compiled function, its ``def`` site, one changed dimension: ``tensor``, ``dim``,
``expected``, ``actual``) of a recompile event or a guard reason."""


def guarded_dims(
    rows: Iterable[GuardRow], placed: Callable[[str], object]
) -> dict[tuple[str, str, str, int], list[int]]:
    """(function, def site, tensor, dim) -> the sizes seen, for each tensor dimension a guard
    says changed (``tensor`` in the function's own spelling: ``L['x']`` read as ``x``). A row
    whose site is not ``placed`` (dynamo's ``?:0``, a file not here) takes the function and
    site of a row that names the same tensor."""
    rows = list(rows)
    named = {local_name(str(d["tensor"])): (fn, site) for fn, site, d in rows if placed(site)}
    out: dict[tuple[str, str, str, int], list[int]] = {}
    for fn, site, d in rows:
        tensor = local_name(str(d["tensor"]))
        where = (fn, site) if placed(site) else named.get(tensor, (fn, site))
        sizes = out.setdefault((*where, tensor, int(d["dim"])), [])
        for size in (int(d["expected"]), int(d["actual"])):
            if size not in sizes:  # each size once, also when a row's two are equal
                sizes.append(size)
    return out


def guarded_calls(run: RunRecord) -> list[dict[str, Any]]:
    """Each call of the compiled model with an argument a recompile guard named: ``{"name"`` (as
    the guard names it), ``"dim"`` (None for a Python value), ``"site"`` (the call's
    ``file:line`` as the user reads it), ``"expr"`` (the user's own expression passed there)``}``;
    [] when no call can be named (files gone, the argument computed inside the call)."""
    events = run.compile.recompile_events
    if not events:
        return []
    cwd = os.getcwd()
    script = run.script
    bases = tuple(dict.fromkeys([cwd, os.path.dirname(os.path.abspath(script)) if script else cwd]))
    rows = [(e.function, e.site, d) for e in events for d in e.changed_dims]
    keys: dict[tuple[str, str, str, int | None], None] = dict.fromkeys(
        guarded_dims(rows, lambda site: _path(site, bases))
    )
    for e in events:
        for v in e.changed_values:
            keys[(e.function, e.site, str(v["name"]), None)] = None
    cache: Trees = {}
    script_path = _path(f"{script}:1", bases) if script else None
    out = []
    for fn, site, name, dim in keys:
        where = _path(site, bases)
        found = signature(where[0], fn, where[1], cache) if where else None
        if where is None or found is None:
            continue
        files = list(dict.fromkeys([*([script_path[0]] if script_path else []), where[0]]))
        for c in calls_passing(files, found[1], local_name(name), cache) or ():
            rel = os.path.relpath(c.path, cwd)
            shown = c.path if rel.startswith("..") else rel
            if not c.computed:
                out.append({"name": name, "dim": dim, "site": f"{shown}:{c.line}", "expr": c.expr})
    return out
