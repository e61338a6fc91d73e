"""The user's own call, as written: which arguments a constructor call passed, in the user's
source text, so that a fix can rewrite that call instead of inventing a new one.

``call_arguments("train.py", 42, "DataLoader")`` finds the call to ``DataLoader`` that spans
line 42 and returns its positional and keyword arguments as source text.
"""

from __future__ import annotations

import ast
import functools
import linecache
import os
import sys
from typing import Any

from torchdoctor.code_paths import Kind, code_paths

LIBRARIES: frozenset[Kind] = frozenset({"torch", "torchdoctor", "package", "stdlib"})
"""Owners of code that is not the user's to change: a fix lands in the user's code or a
framework's settings, never in these."""

_MAX_ARG_CHARS = 200


@functools.lru_cache(maxsize=32)
def _tree(filename: str) -> ast.Module | None:
    source = "".join(linecache.getlines(filename))
    if not source:
        return None
    try:
        return ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return None


def _func_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _text(source: str, node: ast.AST) -> str:
    text = ast.get_source_segment(source, node) or ast.unparse(node)
    text = " ".join(text.split())  # one line, whatever the user's wrapping
    return text if len(text) <= _MAX_ARG_CHARS else text[: _MAX_ARG_CHARS - 3] + "..."


def call_arguments(filename: str, lineno: int, names: tuple[str, ...]) -> dict[str, Any] | None:
    """``{"func", "args", "kwargs"}`` of the innermost call to one of ``names`` spanning
    ``lineno`` (arguments as the user's source text); ``None`` when the source is unavailable
    or the call uses ``*args`` / ``**kwargs`` we cannot rewrite."""
    tree = _tree(filename)
    if tree is None:
        return None
    found: ast.Call | None = None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _func_name(node.func) in names):
            continue
        end = node.end_lineno or node.lineno
        if node.lineno <= lineno <= end and (found is None or node.lineno >= found.lineno):
            found = node
    if found is None or any(isinstance(a, ast.Starred) for a in found.args):
        return None
    if any(k.arg is None for k in found.keywords):
        return None
    source = "".join(linecache.getlines(filename))
    return {
        "func": _text(source, found.func),
        "args": [_text(source, a) for a in found.args],
        "kwargs": {str(k.arg): _text(source, k.value) for k in found.keywords},
    }


def user_frame_site(skip: frozenset[Kind] = LIBRARIES) -> tuple[str, int] | None:
    """``(file, line)`` of the innermost caller whose owner (``code_paths``) is not in ``skip``
    (by default every library: torch, torchdoctor, installed packages, the standard library).
    Pseudo-files are passed over (a dataclass's generated ``__init__`` is ``<string>``): they
    have no source line to read or rewrite."""
    paths = code_paths()
    frame = sys._getframe(1)
    while frame is not None:
        raw = frame.f_code.co_filename
        if not raw.startswith("<") and paths.kind(raw) not in skip:
            return os.path.abspath(raw), frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]
    return None
