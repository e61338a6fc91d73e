"""``sync-every-n``: a ``.item()`` / ``.cpu()`` / ``.tolist()`` that reads a device value every
step, moved to every N steps.

Two shapes are rewritten, everything else is refused with the reason:

- an accumulator, ``total += loss.item()``: becomes ``total += loss.detach()`` (the sum stays on
  the device, no sync), and each place that reads ``total`` reads ``float(total)``: one sync
  where the value is used (every N steps, or once after the loop). Refused when ``total`` is
  read unconditionally every step (that read would sync every step anyway);
- a log line, ``print(f"... {loss.item():.4f}")`` (any call statement): runs every N steps,
  ``if step % N == 0:``, with the loop's own counter (``enumerate``, ``range``, or a
  ``step += 1`` in the loop). Refused when the loop has no counter.

A read whose value decides what the step does (``if loss.item() > 10:``), or is kept in a
variable, is refused: moving it would change the program. N: the smallest of 10, 20, 50, 100
that leaves the remaining syncs under 1% of the step (from the finding's blocked time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import ExpressionContext, ExpressionContextProvider

from torchdoctor.fix.codemods.base import located, parse_or_refuse
from torchdoctor.fix.cst_tools import Parsed, full_name, literal, wrap
from torchdoctor.fix.model import FindingRef, Refusal, Rewrite, Target

if TYPE_CHECKING:
    from torchdoctor.fix.context import FixContext

SYNC_METHODS = ("item", "tolist", "cpu", "numpy")
EVERY_CHOICES = (10, 20, 50, 100)
_REMAINING_SHARE = 0.01  # what the syncs left may cost, as a share of the step


def every_n(finding: FindingRef) -> int:
    """N such that the syncs left cost at most 1% of the step (10 when nothing is known)."""
    step = finding.step_ms
    blocked = finding.evidence.get("blocked_ms_per_step")
    if not step or not isinstance(blocked, int | float) or blocked <= 0:
        return EVERY_CHOICES[0]
    for n in EVERY_CHOICES:
        if blocked / n <= _REMAINING_SHARE * step:
            return n
    return EVERY_CHOICES[-1]


def _sites(finding: FindingRef) -> list[str]:
    rows = [
        *(finding.evidence.get("sites") or []),
        *(finding.evidence.get("sync_debug_sites") or []),
    ]
    sites = [str(r["site"]) for r in rows if isinstance(r, dict) and r.get("site")]
    return list(dict.fromkeys(sites or list(finding.where)))


def is_sync(call: cst.Call) -> bool:
    """``x.item()`` / ``.tolist()`` / ``.cpu()`` / ``.numpy()`` / ``.to("cpu")``."""
    f = call.func
    if not isinstance(f, cst.Attribute):
        return False
    if f.attr.value in SYNC_METHODS:
        return True
    if f.attr.value == "to" and call.args:
        v = literal(call.args[0].value)
        return isinstance(v, str) and v.startswith("cpu")
    return False


def _syncs_in(node: cst.CSTNode) -> list[cst.Call]:
    found: list[cst.Call] = []

    class _V(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            if is_sync(n):
                found.append(n)

    node.visit(_V())
    return found


def _loop_counter(p: Parsed, loop: cst.For | cst.While) -> str | None:
    """The loop's step counter: ``i`` of ``enumerate``/``range``, or a ``name += 1`` in it."""
    if isinstance(loop, cst.For):
        it = loop.iter
        fn = full_name(it.func) if isinstance(it, cst.Call) else ""
        if fn == "range" and isinstance(loop.target, cst.Name):
            return loop.target.value
        if fn == "enumerate" and isinstance(loop.target, cst.Tuple) and loop.target.elements:
            first = loop.target.elements[0].value
            if isinstance(first, cst.Name):
                return first.value
    for stmt in loop.body.body if isinstance(loop.body, cst.IndentedBlock) else []:
        if isinstance(stmt, cst.SimpleStatementLine):
            for s in stmt.body:
                if (
                    isinstance(s, cst.AugAssign)
                    and isinstance(s.operator, cst.AddAssign)
                    and isinstance(s.target, cst.Name)
                    and literal(s.value) == 1
                ):
                    return s.target.value
    return None


def _conditional_in_loop(p: Parsed, node: cst.CSTNode, loop: cst.CSTNode) -> bool:
    """``node`` runs only on some steps: an ``if`` lies between it and the loop."""
    for a in p.ancestors(node):
        if a is loop:
            return False
        if isinstance(a, cst.If | cst.IfExp | cst.BooleanOperation):
            return True
    return False


def _scope(p: Parsed, node: cst.CSTNode) -> cst.CSTNode:
    return p.enclosing(node, (cst.FunctionDef,)) or p.module


class SyncEveryN:
    id = "sync-every-n"
    title = "device reads every N steps, not every step"
    precision = "fp32"

    def plan(self, finding: FindingRef, ctx: FixContext) -> list[Target | Refusal]:
        sites = _sites(finding)
        if not sites:
            return [
                Refusal("no call site of the syncs was recorded (torchdoctor check records them)")
            ]
        n = every_n(finding)
        out: list[Target | Refusal] = []
        seen: set[tuple[str, int]] = set()
        for site in sites[:8]:
            where = located(ctx, site)
            if isinstance(where, Refusal):
                out.append(where)
                continue
            # two reads in one statement (a print over two lines) are one edit, at its start
            key = (where[0], _statement_line(ctx.parsed(where[0]), where[1]))
            if key not in seen:
                seen.add(key)
                out.append(Target(self.id, key[0], key[1], {"every": n}))
        return out

    def rewrite(self, source: str, target: Target) -> Rewrite | Refusal:
        p = parse_or_refuse(source)
        if isinstance(p, Refusal):
            return p
        line = target.line
        kinds = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
        stmts = [s for s in p.all(cst.CSTNode) if isinstance(s, kinds) and p.spans(s, line)]  # type: ignore[type-abstract]
        stmt = max(stmts, key=p.line) if stmts else None
        if stmt is None:
            return Refusal(f"no statement at line {line}")
        if isinstance(stmt, cst.BaseCompoundStatement):
            if _syncs_in(_header(stmt)):
                return Refusal(
                    f"the value read at line {line} decides what the step does (a condition)"
                )
            return _no_sync(p, stmt, line)
        syncs = _syncs_in(stmt)
        if not syncs:
            return _no_sync(p, stmt, line)
        loop = p.enclosing(stmt, (cst.For, cst.While, cst.FunctionDef))
        if not isinstance(loop, cst.For | cst.While):
            return Refusal(f"the read at line {line} is not inside a loop")
        small = stmt.body[0] if len(stmt.body) == 1 else None
        if isinstance(small, cst.AugAssign):
            return self._accumulator(p, small, loop, line)
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            return self._log_line(p, stmt, loop, target.params["every"])
        if isinstance(small, cst.Assign | cst.AnnAssign):
            names = [full_name(t.target) for t in getattr(small, "targets", [])] or [
                full_name(getattr(small, "target", cst.Name("_")))
            ]
            return Refusal(
                f"the value read at line {line} is kept in `{', '.join(names)}` and used in the "
                "step: move the read to where it is needed"
            )
        return Refusal(f"the read at line {line} is neither a log line nor an accumulator")

    def _accumulator(
        self, p: Parsed, aug: cst.AugAssign, loop: cst.CSTNode, line: int
    ) -> Rewrite | Refusal:
        value = aug.value
        if not (
            isinstance(aug.operator, cst.AddAssign)
            and isinstance(aug.target, cst.Name)
            and isinstance(value, cst.Call)
            and is_sync(value)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "item"
        ):
            return Refusal(f"line {line} is not `total += x.item()`: not rewritten")
        acc = aug.target.value
        ctx = p.wrapper.resolve(ExpressionContextProvider)
        scope = _scope(p, loop)
        loads = [
            n
            for n in _names(scope, acc)
            if ctx.get(n) == ExpressionContext.LOAD and not _inside(p, n, aug)
        ]
        for n in loads:
            if _inside(p, n, loop) and not _conditional_in_loop(p, n, loop):
                return Refusal(
                    f"`{acc}` is read every step (line {p.line(n)}): the read would sync anyway"
                )
        receiver = value.func.value
        detached = cst.Call(func=cst.Attribute(value=receiver, attr=cst.Name("detach")))
        repl: dict[cst.CSTNode, cst.CSTNode] = {value: detached}
        for n in loads:
            repl[n] = cst.Call(func=cst.Name("float"), args=[cst.Arg(value=n)])
        code = p.code_of(receiver)
        return Rewrite(
            p.replace_many(repl),
            f"{acc} += {code}.detach() on the device; float({acc}) where it is read "
            f"({len(loads)} place(s))",
        )

    def _log_line(
        self, p: Parsed, stmt: cst.BaseStatement, loop: cst.For | cst.While, every: int
    ) -> Rewrite | Refusal:
        counter = _loop_counter(p, loop)
        if counter is None:
            return Refusal(
                "the loop has no step counter (enumerate, range or `step += 1`) to log every "
                f"{every} steps with"
            )
        if not p.in_block(stmt):
            return Refusal("the log line shares a one-line block: not rewritten")
        parent = p.parent[stmt]
        guard = p.parent.get(parent)
        if (
            isinstance(guard, cst.If)
            and counter in p.code_of(guard.test)
            and "%" in p.code_of(guard.test)
        ):
            return Refusal("the log line already runs every N steps", already=True)
        code = wrap(
            p,
            [stmt],
            f"if {counter} % {every} == 0:",
            f"torchdoctor: read the device every {every} steps, not every step",
        )
        return Rewrite(code, f"log line under `if {counter} % {every} == 0:`")


def _header(stmt: cst.BaseCompoundStatement) -> cst.CSTNode:
    """The part of a compound statement that runs to decide its body (test, iterable, items)."""
    if isinstance(stmt, cst.If | cst.While):
        return stmt.test
    if isinstance(stmt, cst.For):
        return stmt.iter
    if isinstance(stmt, cst.With):
        return cst.Tuple([cst.Element(i.item) for i in stmt.items])
    return cst.Name("_")


def _no_sync(p: Parsed, stmt: cst.BaseStatement, line: int) -> Refusal:
    if isinstance(stmt, cst.If) and "%" in p.code_of(stmt.test):
        return Refusal("the read already runs every N steps", already=True)
    text = p.code_of(stmt)
    if ".detach()" in text and "+=" in text:
        return Refusal("the value is already accumulated on the device", already=True)
    if isinstance(p.parent.get(p.parent.get(stmt)), cst.If):  # type: ignore[arg-type]
        return Refusal(f"no host sync left at line {line}", already=True)
    return Refusal(f"no .item() / .cpu() / .tolist() at line {line} (was the file changed?)")


def _statement_line(p: Parsed | None, line: int) -> int:
    """The first line of the innermost simple statement spanning ``line``."""
    if p is None:
        return line
    stmts = [st for st in p.all(cst.SimpleStatementLine) if p.spans(st, line)]
    return p.line(max(stmts, key=p.line)) if stmts else line


def _names(node: cst.CSTNode, name: str) -> list[cst.Name]:
    found: list[cst.Name] = []

    class _V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            if n.value == name:
                found.append(n)

    node.visit(_V())
    return found


def _inside(p: Parsed, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
    return node is outer or any(a is outer for a in p.ancestors(node))


CODEMOD = SyncEveryN()
