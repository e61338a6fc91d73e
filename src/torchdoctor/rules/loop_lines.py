"""A user's line that holds a large share of the step as its own Python: a per-element loop.

The line table (``record/lines.py``) says which line the step's time sat on and what ran under
it. A line that writes one tensor element per Python iteration (``mask[b, t] = 1.0``,
``out[i] += out[i + 1]``) shows there as Python with at most a few tiny operators (select,
copy_, fill_) under it: each write is several dispatcher round trips. Neither
``torch.compile(model)`` nor a fused optimizer touches it; the fix is that loop as one tensor
operation. Plain data; no torch import.
"""

from __future__ import annotations

import ast
import linecache
from dataclasses import dataclass
from typing import Literal

from torchdoctor.record.lines import LineRow, LineTable
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.sites import short_site

LoopKind = Literal["mask", "accumulate", "element-write", "loop"]
"""What a loop line does: writes a constant element by element (a mask), accumulates into an
element (a running sum), writes a computed element, or is some other per-element loop."""

_ELEMENT_OPS = frozenset(
    {
        "aten::select",
        "aten::slice",
        "aten::as_strided",
        "aten::copy_",
        "aten::fill_",
        "aten::add_",
        "aten::add",
        "aten::sub_",
        "aten::mul_",
        "aten::mul",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::index_put_",
        "aten::lift_fresh",
        "aten::detach_",
        "aten::zeros",
        "aten::empty",
        "aten::to",
        "aten::_to_copy",
        "aten::scalar_tensor",
    }
)
"""Operators a per-element Python loop calls for each element (indexing, a scalar write)."""


@dataclass(frozen=True)
class LoopLine:
    """A per-element loop line of the line table."""

    site: str
    """``file:line``."""
    code: str
    kind: LoopKind
    target: str
    """The tensor the line writes (``mask``), "" when it writes none."""
    self_ms: float
    """The line table's self time, ms per step (of the table's own step)."""
    share: float
    """``self_ms`` as a share of the table's step."""


def _strip(code: str) -> str:
    text = code.split("#", 1)[0].strip()
    return text.rstrip(":").strip() if text.startswith(("for ", "while ")) else text


def _is_element_index(node: ast.expr) -> bool:
    """``x[i]`` / ``x[b, t]``: an index made of names, constants and arithmetic, no slice."""
    parts = node.elts if isinstance(node, ast.Tuple) else [node]
    return all(
        not isinstance(p, ast.Slice)
        and all(
            isinstance(
                n,
                ast.Name
                | ast.Constant
                | ast.BinOp
                | ast.UnaryOp
                | ast.operator
                | ast.unaryop
                | ast.Load,
            )
            for n in ast.walk(p)
        )
        for p in parts
    )


def _element_target(node: ast.expr) -> str | None:
    """The name a subscript write goes to when it writes one element, else None."""
    if isinstance(node, ast.Subscript) and _is_element_index(node.slice):
        base = node.value
        while isinstance(base, ast.Attribute | ast.Subscript):
            base = base.value
        return base.id if isinstance(base, ast.Name) else "?"
    return None


def code_kind(code: str) -> tuple[LoopKind, str] | None:
    """What one source line does element by element, and the tensor it writes; ("loop", "")
    for a ``for``/``while`` header; None for a line that is neither."""
    text = _strip(code)
    if text.startswith(("for ", "while ")):
        return "loop", ""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    if len(tree.body) != 1:
        return None
    stmt = tree.body[0]
    if isinstance(stmt, ast.AugAssign):
        name = _element_target(stmt.target)
        return ("accumulate", name) if name is not None else None
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        name = _element_target(stmt.targets[0])
        if name is None:
            return None
        if isinstance(stmt.value, ast.Constant | ast.UnaryOp):
            return "mask", name
        reads_itself = any(
            isinstance(n, ast.Subscript) and _element_target(n) == name
            for n in ast.walk(stmt.value)
        )
        return ("accumulate" if reads_itself else "element-write"), name
    return None


def _parsed(site: str) -> tuple[ast.Module, int] | None:
    path, _, line = site.rpartition(":")
    try:
        lineno = int(line)
        source = "".join(linecache.getlines(path))
        return (ast.parse(source), lineno) if source else None
    except (ValueError, SyntaxError):
        return None


def in_python_loop(site: str) -> bool | None:
    """Whether ``site`` (``file:line``) sits inside a ``for``/``while`` body of its file; None
    when the file cannot be read or parsed."""
    parsed = _parsed(site)
    if parsed is None:
        return None
    tree, lineno = parsed
    for node in ast.walk(tree):
        if isinstance(node, ast.For | ast.While) and any(
            s.lineno <= lineno <= (s.end_lineno or s.lineno) for s in node.body
        ):
            return True
    return False


def _is_container(value: ast.expr) -> bool:
    if isinstance(value, ast.List | ast.ListComp | ast.Dict | ast.DictComp | ast.Set):
        return True
    if isinstance(value, ast.BinOp):  # [0] * n
        return _is_container(value.left) or _is_container(value.right)
    return isinstance(value, ast.Call) and getattr(value.func, "id", "") in (
        "list",
        "dict",
        "defaultdict",
        "Counter",
    )


def python_container(site: str, name: str) -> bool:
    """Whether ``name``, written at ``site``, is a Python list or dict built in the same
    function (``hits = [0] * 100``): its element writes call no torch operator."""
    parsed = _parsed(site)
    if parsed is None or not name:
        return False
    tree, lineno = parsed
    scopes = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and n.lineno <= lineno <= (n.end_lineno or n.lineno)
    ]
    scope: ast.AST = min(scopes, key=lambda n: (n.end_lineno or n.lineno) - n.lineno, default=tree)
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            named = any(isinstance(t, ast.Name) and t.id == name for t in targets)
            if named and _is_container(node.value):
                return True
    return False


def _own_share(row: LineRow) -> float:
    """The share of the row's self time that is its own Python or per-element operators (no
    library call, no operator of weight)."""
    if not row.self_ms:
        return 0.0
    own_call = sum(ms for call, ms in row.calls if call == "") if row.calls else row.self_ms
    heavy = sum(ms for op, ms in row.ops if op not in _ELEMENT_OPS)
    return max(0.0, min(own_call, row.self_ms) - heavy) / row.self_ms


def _per_element(site: str, kind: LoopKind, target: str) -> bool:
    """A loop header, or an element write inside a loop into something that is no Python
    list or dict (one write outside any loop is no per-element loop)."""
    if kind == "loop":
        return True
    return in_python_loop(site) is not False and not python_container(site, target)


def loop_line_of(row: LineRow, table_step_ms: float) -> LoopLine | None:
    """``row`` as a per-element loop line: its own Python (no operator-level cause), and its
    source a per-element write inside a loop or a loop header; None otherwise."""
    if _own_share(row) < 0.5:
        return None
    kind = code_kind(row.code)
    if kind is None or not _per_element(row.site, *kind):
        return None
    share = row.self_ms / table_step_ms if table_step_ms else 0.0
    return LoopLine(row.site, row.code.strip(), kind[0], kind[1], row.self_ms, share)


def top_loop_line(table: LineTable) -> LoopLine | None:
    """The line table's largest per-element loop line holding ``LOOP_LINE_SHARE`` of the step
    or more, None when there is none."""
    step = table.ms_per_step
    if not table.rows or not step:
        return None
    for row in sorted(table.rows, key=lambda r: -r.self_ms):
        if row.self_ms / step < th.LOOP_LINE_SHARE:
            return None
        line = loop_line_of(row, step)
        if line is not None:
            return line
    return None


def vectorise_fix(line: LoopLine) -> str:
    """What to change at the loop line, as comments: the names are the user's to choose, so
    it is not printed as paste-ready code."""
    code = line.code.split("#", 1)[0].strip()
    head = f"# {short_site(line.site)}: {code}"
    t = line.target or "the tensor"
    if line.kind == "mask":
        return (
            f"{head}\n# writes one element of {t} per Python iteration (several torch "
            "operators each). Vectorise this loop:\n# build the mask with one tensor operation, "
            "e.g. comparisons against torch.arange:\n"
            f"#     {t} = (torch.arange(T)[None, :] < lengths[:, None]).float()\n"
            f"# or {t}.masked_fill_(condition, value) with the condition computed for the whole "
            "tensor at once"
        )
    if line.kind == "accumulate":
        return (
            f"{head}\n# accumulates into one element of {t} per Python iteration (several "
            "torch operators each). Vectorise this loop:\n# a running sum along a dimension is "
            "one torch.cumsum(x, dim) (from the end: x.flip(dim).cumsum(dim).flip(dim));\n"
            "# a total is x.sum(dim); sums into positions are index_add_ or scatter_add_"
        )
    if line.kind == "element-write":
        return (
            f"{head}\n# writes one element of {t} per Python iteration (several torch "
            "operators each). Vectorise this loop:\n# compute every element at once on whole "
            "tensors (broadcasting, torch.where, advanced indexing) and assign once"
        )
    return (
        f"{head}\n# a Python loop over elements in the step. Move this Python loop into tensor "
        "operations:\n# one operation over the whole tensor (broadcasting, torch.where, cumsum, "
        "gather/scatter) instead of one per element"
    )


def loop_fix_at(site: str, code: str) -> str | None:
    """:func:`vectorise_fix` for a line known by its site and source alone (the step
    account's top lines), None when the line is no per-element loop."""
    kind = code_kind(code)
    if kind is None or not _per_element(site, *kind):
        return None
    return vectorise_fix(LoopLine(site, code.strip(), kind[0], kind[1], 0.0, 0.0))
