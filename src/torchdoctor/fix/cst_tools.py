"""libcst helpers the codemods share: find a node by line, tell torch's names from others, set a
call's argument as the user would have written it, wrap or insert statements.

Every edit goes through the concrete syntax tree, so comments, blank lines, quotes and the
user's wrapping of a call survive; only the nodes a codemod replaces change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import (
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
    QualifiedNameProvider,
    QualifiedNameSource,
)

N = TypeVar("N", bound=cst.CSTNode)


class Parsed:
    """One source file's tree with positions, parents and qualified names."""

    def __init__(self, code: str) -> None:
        self.code = code
        self.module = cst.parse_module(code)
        # unsafe_skip_copy: the metadata is keyed by the nodes of self.module itself, so a
        # node found here can be replaced in self.module.
        self.wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
        self.pos = self.wrapper.resolve(PositionProvider)
        self.parent = self.wrapper.resolve(ParentNodeProvider)
        self._qnames: Any = None

    @property
    def qnames(self) -> Any:
        """Node -> set of ``QualifiedName`` (resolved on first use: the slowest provider)."""
        if self._qnames is None:
            self._qnames = self.wrapper.resolve(QualifiedNameProvider)
        return self._qnames

    def all(self, kind: type[N]) -> list[N]:
        """Every node of ``kind``, in source order."""
        found: list[N] = []

        class _Collect(cst.CSTVisitor):
            def on_visit(self, node: cst.CSTNode) -> bool:
                if isinstance(node, kind):
                    found.append(node)
                return True

        self.module.visit(_Collect())
        return found

    def line(self, node: cst.CSTNode) -> int:
        """1-based first line of ``node``."""
        return int(self.pos[node].start.line)

    def end_line(self, node: cst.CSTNode) -> int:
        return int(self.pos[node].end.line)

    def spans(self, node: cst.CSTNode, line: int) -> bool:
        """``node`` starts at or before ``line`` and ends at or after it."""
        r = self.pos[node]
        return bool(r.start.line <= line <= r.end.line)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Parents of ``node``, innermost first."""
        while node in self.parent:
            node = self.parent[node]
            yield node

    def enclosing(self, node: cst.CSTNode, kinds: tuple[type, ...]) -> Any:
        """The innermost ancestor of one of ``kinds``, or None."""
        return next((a for a in self.ancestors(node) if isinstance(a, kinds)), None)

    def statement(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        """The statement (a line of small statements, or a compound one) holding ``node``."""
        if isinstance(node, cst.BaseStatement):
            return node
        return self.enclosing(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement))

    def in_block(self, stmt: cst.BaseStatement) -> bool:
        """``stmt`` sits in an indented block or the module (not a one-line ``if x: y`` suite)."""
        return isinstance(self.parent.get(stmt), cst.IndentedBlock | cst.Module)

    def code_of(self, node: cst.CSTNode) -> str:
        """The node's source text as written."""
        return self.module.code_for_node(node)

    def replace(self, old: cst.CSTNode, new: cst.CSTNode | cst.RemovalSentinel) -> str:
        """The file's new source with ``old`` replaced (by identity)."""
        if old is self.module:
            assert isinstance(new, cst.Module)
            return new.code
        replaced: Any = self.module.deep_replace(old, new)
        return str(replaced.code)

    def replace_many(self, repl: Mapping[Any, cst.CSTNode]) -> str:
        """The file's new source with every key node replaced by its value (by identity)."""
        return str(self.module.visit(_Replace(repl)).code)

    # -- names --------------------------------------------------------------------------------
    def _qn(self, node: cst.CSTNode) -> Any:
        v = self.qnames.get(node, ())
        return v() if callable(v) else v  # libcst computes qualified names lazily

    def qualified(self, node: cst.CSTNode) -> set[str]:
        """Fully qualified names the node may refer to (``torch.utils.data.DataLoader``)."""
        return {q.name for q in self._qn(node)}

    def is_call_to(self, call: cst.Call, qualified: Sequence[str], bare: str) -> bool:
        """The call calls one of ``qualified``, or an unimported ``bare`` name; a name imported
        from somewhere else (another library's ``DataLoader``) is not a match."""
        names = self.qualified(call)
        if names & set(qualified):
            return True
        full = get_full_name_for_node(call.func) or ""
        if full.rsplit(".", 1)[-1] != bare:
            return False
        imported = any(q.source == QualifiedNameSource.IMPORT for q in self._qn(call))
        return not imported and not names

    def imported_from(self, call: cst.Call) -> str | None:
        """The module-qualified name a call's function was imported as, when imported."""
        for q in self._qn(call):
            if q.source == QualifiedNameSource.IMPORT:
                return str(q.name)
        return None

    def torch_name(self) -> str | None:
        """The name ``torch`` is bound to at module level (``torch``, or its alias)."""
        for stmt in self.module.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if not isinstance(small, cst.Import):
                    continue
                for alias in small.names:
                    name = get_full_name_for_node(alias.name) or ""
                    if alias.asname is None and name.split(".")[0] == "torch":
                        return "torch"
                    if name == "torch" and isinstance(alias.asname, cst.AsName):
                        return get_full_name_for_node(alias.asname.name)
        return None


def full_name(node: cst.CSTNode) -> str:
    """Dotted name of a Name / Attribute chain ('' for anything else)."""
    return get_full_name_for_node(node) or ""


def innermost_spanning(p: Parsed, nodes: Sequence[N], line: int) -> N | None:
    """Of ``nodes``, the innermost (latest starting) one that spans ``line``."""
    spanning = [n for n in nodes if p.spans(n, line)]
    return max(spanning, key=lambda n: (p.line(n), -p.end_line(n))) if spanning else None


# -- arguments --------------------------------------------------------------------------------
def has_star_args(call: cst.Call) -> bool:
    """``f(*args)`` or ``f(**kwargs)``: the arguments are built at run time."""
    return any(a.star for a in call.args)


def arg_index(call: cst.Call, name: str, positional: Sequence[str] = ()) -> int | None:
    """Index in ``call.args`` of the argument bound to parameter ``name`` (by keyword, or by
    position when ``positional`` lists the parameters in order)."""
    pos = 0
    for i, a in enumerate(call.args):
        if a.keyword is not None:
            if a.keyword.value == name:
                return i
        elif not a.star:
            if pos < len(positional) and positional[pos] == name:
                return i
            pos += 1
    return None


def literal(node: cst.BaseExpression) -> Any:
    """The value of a literal (int, float, True/False/None, string), else a ``NotLiteral``."""
    if isinstance(node, cst.Integer | cst.Float):
        return node.evaluated_value
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    return NOT_LITERAL


class _NotLiteral:
    def __repr__(self) -> str:
        return "NOT_LITERAL"


NOT_LITERAL: Any = _NotLiteral()


def _equal_like(call: cst.Call) -> cst.AssignEqual | cst.MaybeSentinel:
    """The ``=`` spacing the call's keywords already use (``a=b``, or ``a = b``)."""
    for a in call.args:
        if a.keyword is not None and isinstance(a.equal, cst.AssignEqual):
            return a.equal
    return cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
    )


def _separator(call: cst.Call) -> cst.Comma:
    """The comma and spacing between two arguments as the call writes them."""
    args = call.args
    if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
        sep = args[-2].comma
        ws = sep.whitespace_after
        if isinstance(ws, cst.ParenthesizedWhitespace) and ws.first_line.comment is not None:
            # the previous argument's own comment stays with it, not with the new one
            ws = ws.with_changes(first_line=cst.TrailingWhitespace())
        return sep.with_changes(whitespace_after=ws)
    ws_args = call.whitespace_before_args
    if isinstance(ws_args, cst.ParenthesizedWhitespace):  # f(\n    a)  -> one per line
        return cst.Comma(whitespace_after=ws_args.with_changes(first_line=cst.TrailingWhitespace()))
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def set_args(call: cst.Call, values: dict[str, str], positional: Sequence[str] = ()) -> cst.Call:
    """``call`` with each ``name=code`` in ``values`` set: an argument already passed (by
    keyword or position) gets the new value in place; a new one is appended in the call's
    own style (same line or one per line, trailing comma kept, the last argument's comment
    kept with it)."""
    args = list(call.args)
    for name, code in values.items():
        expr = cst.parse_expression(code)
        i = arg_index(call.with_changes(args=args), name, positional)
        if i is not None:
            args[i] = args[i].with_changes(value=expr)
            continue
        new = cst.Arg(value=expr, keyword=cst.Name(name), equal=_equal_like(call))
        if not args:
            args = [new]
            continue
        last = args[-1]
        sep = _separator(call.with_changes(args=args))
        if isinstance(last.comma, cst.Comma) and _has_comment(last.comma):
            # f(a,  # why\n) -> the comment stays after a, the new argument goes on a line
            # of its own with the arguments' indentation, and the call ends as it did.
            own = last.comma.with_changes(whitespace_after=_indent_like(sep, last.comma))
            args[-1] = last.with_changes(comma=own)
            new = new.with_changes(comma=_trailing_like(last.comma))
        else:
            args[-1] = last.with_changes(comma=sep)
            new = new.with_changes(comma=last.comma)
        # the space before ")" belongs to the last argument: it moves to the new last one
        new = new.with_changes(whitespace_after_arg=last.whitespace_after_arg)
        args[-1] = args[-1].with_changes(whitespace_after_arg=cst.SimpleWhitespace(""))
        args.append(new)
    return call.with_changes(args=args)


def _has_comment(comma: cst.Comma) -> bool:
    ws = comma.whitespace_after
    return isinstance(ws, cst.ParenthesizedWhitespace) and ws.first_line.comment is not None


def _indent_like(sep: cst.Comma, own: cst.Comma) -> cst.BaseParenthesizableWhitespace:
    """``own``'s whitespace (keeping its comment) with the indentation of ``sep``."""
    ws = own.whitespace_after
    target = sep.whitespace_after
    if isinstance(ws, cst.ParenthesizedWhitespace) and isinstance(
        target, cst.ParenthesizedWhitespace
    ):
        return ws.with_changes(indent=target.indent, last_line=target.last_line)
    return ws


def _trailing_like(own: cst.Comma) -> cst.Comma:
    """A trailing comma that ends the line like ``own`` did (no comment), before ``)``."""
    ws = own.whitespace_after
    assert isinstance(ws, cst.ParenthesizedWhitespace)
    return own.with_changes(whitespace_after=ws.with_changes(first_line=cst.TrailingWhitespace()))


def rename_arg(call: cst.Call, old: str, new: str, code: str) -> cst.Call:
    """``call`` with the keyword argument ``old=...`` replaced by ``new=code`` in its place."""
    args = list(call.args)
    i = arg_index(call, old)
    assert i is not None
    args[i] = args[i].with_changes(keyword=cst.Name(new), value=cst.parse_expression(code))
    return call.with_changes(args=args)


# -- statements -------------------------------------------------------------------------------
def _container(p: Parsed, stmt: cst.BaseStatement) -> tuple[Any, list[Any], int]:
    parent: Any = p.parent[stmt]
    body = list(parent.body)
    index = next(i for i, s in enumerate(body) if s is stmt)
    return parent, body, index


def _replace_body(p: Parsed, parent: Any, body: list[Any]) -> str:
    return p.replace(parent, parent.with_changes(body=body))


def statement(code: str) -> cst.BaseStatement:
    """One statement parsed from source text."""
    return cst.parse_statement(code)


def with_comment(stmt: cst.SimpleStatementLine, comment: str) -> cst.SimpleStatementLine:
    """``stmt`` with a trailing ``# comment``."""
    return stmt.with_changes(
        trailing_whitespace=cst.TrailingWhitespace(
            whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(f"# {comment}")
        )
    )


def insert_before(p: Parsed, stmt: Any, new: Sequence[Any]) -> str:
    """The source with ``new`` inserted just before ``stmt``; the blank lines and comments above
    ``stmt`` move above the first new statement, so they still open the same block."""
    parent, body, i = _container(p, stmt)
    lead = list(stmt.leading_lines)
    first, *rest = new
    body[i : i + 1] = [
        first.with_changes(leading_lines=lead),
        *rest,
        stmt.with_changes(leading_lines=[]),
    ]
    return _replace_body(p, parent, body)


def insert_after(p: Parsed, stmt: cst.BaseStatement, new: Sequence[cst.BaseStatement]) -> str:
    """The source with ``new`` inserted just after ``stmt``."""
    parent, body, i = _container(p, stmt)
    body[i + 1 : i + 1] = list(new)
    return _replace_body(p, parent, body)


def wrap(p: Parsed, stmts: Sequence[Any], header: str, comment: str | None = None) -> str:
    """The source with the contiguous ``stmts`` (one block) moved into ``header:`` (an ``if`` or
    ``with`` line); the comments above the first statement stay above the new line."""
    parent, body, i = _container(p, stmts[0])
    n = len(stmts)
    assert all(body[i + k] is s for k, s in enumerate(stmts))
    compound = cst.parse_statement(f"{header}\n    pass\n")
    assert isinstance(compound, cst.BaseCompoundStatement)
    block = compound.body
    assert isinstance(block, cst.IndentedBlock)
    inner = [stmts[0].with_changes(leading_lines=[]), *stmts[1:]]
    head = (
        cst.TrailingWhitespace(
            whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(f"# {comment}")
        )
        if comment
        else block.header
    )
    compound = compound.with_changes(
        body=block.with_changes(body=inner, header=head),
        leading_lines=stmts[0].leading_lines,
    )
    body[i : i + n] = [compound]
    return _replace_body(p, parent, body)


def ensure_import(code: str, module: str) -> str:
    """``code`` with ``import <module>`` added after the module-level imports when the name is
    not bound at module level yet."""
    p = Parsed(code)
    body = list(p.module.body)
    for stmt in body:
        for s in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if isinstance(s, cst.Import) and any(
                a.asname is None and full_name(a.name).split(".")[0] == module for a in s.names
            ):
                return code
    new = cst.parse_statement(f"import {module}\n")
    anchor = last_import(p)
    if anchor is None:
        body.insert(1 if body and _is_docstring(body[0]) else 0, new)
    else:
        body.insert(next(i for i, s in enumerate(body) if s is anchor) + 1, new)
    return p.module.with_changes(body=body).code


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )


def last_import(p: Parsed) -> cst.SimpleStatementLine | None:
    """The last statement of the module's leading block of imports."""
    found = None
    for stmt in p.module.body:
        if isinstance(stmt, cst.SimpleStatementLine) and all(
            isinstance(s, cst.Import | cst.ImportFrom) for s in stmt.body
        ):
            found = stmt
        elif found is not None and not _is_docstring(stmt):
            break
    return found


def contains_call(node: cst.CSTNode, attrs: Sequence[str]) -> cst.Call | None:
    """The first call ``x.<attr>(...)`` (or ``<attr>(...)``) inside ``node``."""
    hits: list[cst.Call] = []

    class _V(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            f = n.func
            name = f.attr.value if isinstance(f, cst.Attribute) else full_name(f)
            if name in attrs and not hits:
                hits.append(n)

    node.visit(_V())
    return hits[0] if hits else None


class _Replace(cst.CSTTransformer):
    """Replace nodes by identity, several at once."""

    def __init__(self, repl: Mapping[Any, cst.CSTNode]) -> None:
        super().__init__()
        self.repl = repl

    def on_leave(self, original_node: Any, updated_node: Any) -> Any:
        return self.repl.get(original_node, updated_node)
