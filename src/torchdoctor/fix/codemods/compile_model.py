"""``compile-model``: compile a launch-bound model, or take an already compiled one to the next
mode.

Not compiled yet, and the script compiles under a setting of its own (nanoGPT's ``if compile:``,
``if args.compile:``): that setting, on the command line when the script reads it from there
(``--compile=True``), else its default edited (``fix/switches.py``). Otherwise
``model.compile()`` after the model is built (``nn.Module.compile`` compiles in place, so
``state_dict`` keys and ``isinstance`` checks stay as they were, unlike
``model = torch.compile(model)``). The model is the module whose ``.parameters()`` the
optimizer takes, or the object whose method builds the optimizer
(``optimizer = model.configure_optimizers(...)``). Already compiled: the ``torch.compile`` call gets the next mode on a GPU
(default -> ``reduce-overhead``, whose CUDA graphs replay the step's launches; then
``max-autotune``); on a CPU no mode adds anything, so that is refused with the next step.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

import libcst as cst

from torchdoctor.fix import switches
from torchdoctor.fix.codemods.base import Hit, one_call, one_site, parse_or_refuse, search
from torchdoctor.fix.cst_tools import (
    NOT_LITERAL,
    Parsed,
    arg_index,
    full_name,
    innermost_spanning,
    insert_after,
    literal,
    set_args,
    statement,
    with_comment,
)
from torchdoctor.fix.model import FindingRef, Refusal, Rewrite, Switch, Target

if TYPE_CHECKING:
    from torchdoctor.fix.context import FixContext
    from torchdoctor.record.rows import CompileCall
    from torchdoctor.record.run import CompileStats

NEXT_MODE: dict[Any, str] = {
    None: "reduce-overhead",
    "default": "reduce-overhead",
    "reduce-overhead": "max-autotune",
    "max-autotune-no-cudagraphs": "max-autotune",
}


def _is_optimizer(p: Parsed, node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.Call):
        return False
    return any(q.startswith("torch.optim.") for q in p.qualified(node))


def _is_compile(p: Parsed, node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.Call)
        and p.is_call_to(node, ("torch.compile",), "compile")
        and ("torch.compile" in p.qualified(node))
    )


def _is_compile_method(p: Parsed, node: cst.Call) -> bool:
    """``model.compile(...)``: ``nn.Module.compile`` (not ``re.compile`` or another import)."""
    f = node.func
    return (
        isinstance(f, cst.Attribute)
        and f.attr.value == "compile"
        and isinstance(f.value, cst.Name | cst.Attribute)
        and p.imported_from(node) is None
    )


def _model_site(ctx: FixContext, hit: Hit) -> tuple[str, cst.Call, str] | Refusal:
    """Where the model is named: ``(file, call, name)`` for the optimizer call itself
    (``Opt(model.parameters())``), or for the call of the method that builds it
    (``optimizer = model.configure_optimizers(...)``: the model is the method's receiver)."""
    p = ctx.parsed(hit.file)
    assert p is not None and isinstance(hit.node, cst.Call)
    fn = p.enclosing(hit.node, (cst.FunctionDef,))
    owner = p.enclosing(fn, (cst.FunctionDef, cst.ClassDef)) if fn is not None else None
    if isinstance(owner, cst.ClassDef):
        return _method_caller(ctx, hit, fn.name.value, owner.name.value)
    name = _model_name(hit.node)
    if name is None:
        return Refusal(
            "the optimizer does not take `model.parameters()`: cannot tell which module is the model"
        )
    return hit.file, hit.node, name


def _method_caller(
    ctx: FixContext, hit: Hit, method: str, cls: str
) -> tuple[str, cst.Call, str] | Refusal:
    """The one call ``x.<method>(...)`` in the user's files, with ``x`` a name (not ``self``)."""
    where = f"`{cls}.{method}` ({ctx.rel(hit.file)}:{hit.line})"
    callers: list[tuple[str, cst.Call, str]] = []
    for f in ctx.files():
        q = ctx.parsed(f)
        for c in q.all(cst.Call) if q is not None else ():
            if isinstance(c.func, cst.Attribute) and c.func.attr.value == method:
                callers.append((f, c, full_name(c.func.value)))
    mine = [c for c in callers if c[2] and "." not in c[2] and c[2] != "self"]
    if len(callers) != 1 or not mine:
        shown = ", ".join(f"{ctx.rel(f)}:{ctx.parsed(f).line(c)}" for f, c, _ in callers[:4])  # type: ignore[union-attr]
        found = f"called at {shown}" if callers else "never called in the user's files"
        return Refusal(
            f"the optimizer is built in {where}, {found}: cannot tell which object is the "
            "model; compile it where it is built"
        )
    return mine[0]


def _leaves_block(stmt: cst.BaseStatement) -> bool:
    """A statement after which nothing in its block runs (``return``, ``raise``...)."""
    ends = (cst.Return, cst.Raise, cst.Break, cst.Continue)
    return isinstance(stmt, cst.SimpleStatementLine) and any(isinstance(s, ends) for s in stmt.body)


def _model_name(call: cst.Call) -> str | None:
    """``model`` for ``Opt(model.parameters(), ...)``."""
    if not call.args or call.args[0].keyword is not None:
        return None
    first = call.args[0].value
    if (
        isinstance(first, cst.Call)
        and isinstance(first.func, cst.Attribute)
        and first.func.attr.value == "parameters"
        and isinstance(first.func.value, cst.Name)
    ):
        return first.func.value.value
    return None


def _anchor(p: Parsed, opt_call: cst.Call, name: str) -> cst.BaseStatement | None:
    """The statement after which ``name.compile()`` goes: the last assignment of ``name`` in
    the optimizer's block before it, else the optimizer's own statement."""
    opt_stmt = p.statement(opt_call)
    if opt_stmt is None or not p.in_block(opt_stmt):
        return None
    block: Any = p.parent[opt_stmt]
    found: cst.BaseStatement = opt_stmt
    for stmt in block.body:
        if stmt is opt_stmt:
            break
        if isinstance(stmt, cst.SimpleStatementLine) and any(
            isinstance(s, cst.Assign) and any(full_name(t.target) == name for t in s.targets)
            for s in stmt.body
        ):
            found = stmt
    return found


def _built_every_step(ctx: FixContext) -> Refusal | None:
    """A hook or module the run built every step: compiled, the model would meet a new one at
    each call, recompile (dynamo guards on the module's hooks) and run eager once the
    recompile limit is hit (a held-out case: 10 recompiles, 26.8 s, graph breaks, the
    hooks still piling up)."""
    measured = ctx.record.steps.measured_steps
    for r in ctx.record.repeats:
        if r.kind in ("hook", "module") and measured and r.calls >= measured:
            file, _, line = r.site.rpartition(":")
            return Refusal(
                f"{r.what or r.kind} is built every step at {ctx.rel(file)}:{line}: compiled, "
                "the model would recompile at each new one; build it once first (see "
                "repeated-construction)"
            )
    return None


class CompileModel:
    id = "compile-model"
    title = "torch.compile (or the next mode) for a launch-bound step"
    precision = "fp32"

    def plan(self, finding: FindingRef, ctx: FixContext) -> list[Target | Refusal | Switch]:
        piling = _built_every_step(ctx)
        if piling is not None:
            return [piling]
        rec = ctx.record.compile
        calls = rec.compile_calls
        if calls or rec.compiles:
            return [self._next_mode(calls, rec, ctx)]
        if not ctx.cuda and not (shutil.which("g++") or shutil.which("c++")):
            return [Refusal("torch.compile needs a C++ compiler on the CPU; none is on PATH")]
        own = self._own_switch(ctx)
        if own is not None:
            return [own]
        hit = one_site(
            search(ctx, ctx.files(), cst.Call, _is_optimizer), ctx, "an optimizer construction"
        )
        if isinstance(hit, Refusal):
            return [hit]
        assert isinstance(hit.node, cst.Call)
        site = _model_site(ctx, hit)
        if isinstance(site, Refusal):
            return [site]
        file, call, name = site
        p = ctx.parsed(file)
        anchor = _anchor(p, call, name) if p is not None else None
        if anchor is None or p is None:
            return [
                Refusal("the optimizer is built inside a one-line block: cannot place the compile")
            ]
        if _leaves_block(anchor):
            return [
                Refusal(
                    f"the optimizer is built in a `return` at {ctx.rel(file)}:{p.line(anchor)}: "
                    f"compile `{name}` where it is built"
                )
            ]
        return [Target(self.id, file, p.line(anchor), {"model": name})]

    def _own_switch(self, ctx: FixContext) -> Target | Refusal | Switch | None:
        """The script's own compile, skipped in this run because a setting was off: that
        setting turned on (a command line, or its default edited); None when the script has
        no compile under a condition."""
        guarded: list[tuple[str, int, switches.Guard]] = []
        for f in ctx.files():
            p = ctx.parsed(f)
            if p is None:
                continue
            for c in p.all(cst.Call):
                if _is_compile(p, c) or _is_compile_method(p, c):
                    g = switches.guard_of(p, f, c)
                    if g is not None:
                        guarded.append((f, p.line(c), g))
        if not guarded:
            return None
        known = {(g.setting.file, g.setting.line, g.wanted): g for _, _, g in guarded if g.setting}
        if len(known) != 1:
            f, line, g = guarded[0]
            return Refusal(
                f"the script compiles at {ctx.rel(f)}:{line} only when `{g.code}` is true: "
                "make it true for this run"
                + (f" ({len(guarded)} such compile calls)" if len(guarded) > 1 else "")
            )
        (g,) = known.values()
        s = g.setting
        assert s is not None
        now = switches.value_in_run(s, ctx.argv)
        if now is not switches.NOT_LITERAL and bool(now) == g.wanted:
            return Refusal(
                f"the script's own compile runs when `{g.code}` is true, and `{s.spelled}` is "
                f"{now!r} in this run, yet no compile was recorded: see where it is skipped"
            )
        value: Any = int(g.wanted) if type(s.default) is int else g.wanted  # COMPILE = 0
        switch = switches.switch_to(s, value, ctx.argv, ctx.rel(s.file))
        if switch is not None:
            return switch
        return Target(self.id, s.file, s.line, {"setting": s.name, "value": value})

    def _next_mode(
        self, calls: tuple[CompileCall, ...], rec: CompileStats, ctx: FixContext
    ) -> Target | Refusal:
        breaks = {b.site for b in rec.graph_breaks}
        if breaks:
            return Refusal(
                f"the model is compiled but breaks into pieces at {len(breaks)} place(s): fix "
                "the graph breaks first (see graph-breaks)"
            )
        if not ctx.cuda:
            return Refusal(
                "already compiled, and on a CPU no torch.compile mode adds more (CUDA graphs need "
                "a GPU): a fused optimizer or more work per operator is the next step"
            )
        mode = calls[0].mode if calls else None
        nxt = NEXT_MODE.get(mode)
        if nxt is None:
            return Refusal(f"already compiled with mode={mode!r}, the last mode", already=True)
        return one_call(self.id, ctx, _is_compile, "torch.compile(...)", {"mode": nxt})

    def rewrite(self, source: str, target: Target) -> Rewrite | Refusal:
        p = parse_or_refuse(source)
        if isinstance(p, Refusal):
            return p
        if "mode" in target.params:
            return self._set_mode(p, target)
        if "setting" in target.params:
            return switches.edit_default(
                source, target.params["setting"], target.line, target.params["value"]
            )
        name = target.params["model"]
        for c in p.all(cst.Call):
            f = c.func
            if (
                isinstance(f, cst.Attribute)
                and f.attr.value == "compile"
                and full_name(f.value) == name
            ):
                return Refusal(f"{name}.compile() is already called", already=True)
            if _is_compile(p, c) and c.args and full_name(c.args[0].value) == name:
                return Refusal(f"torch.compile({name}) is already called", already=True)
        anchor = next(
            (
                s
                for s in p.all(cst.SimpleStatementLine)
                if p.line(s) == target.line and p.in_block(s)
            ),
            None,
        )
        if anchor is None:
            return Refusal(f"no statement at line {target.line}")
        new = with_comment(
            statement(f"{name}.compile()\n"),  # type: ignore[arg-type]
            "torchdoctor: fuse the step's many small operators (compiles at the first call)",
        )
        return Rewrite(insert_after(p, anchor, [new]), f"{name}.compile()")

    def _set_mode(self, p: Parsed, target: Target) -> Rewrite | Refusal:
        calls = [c for c in p.all(cst.Call) if _is_compile(p, c)]
        call = innermost_spanning(p, calls, target.line)
        if call is None:
            return Refusal(f"no torch.compile(...) call at line {target.line}")
        mode = target.params["mode"]
        i = arg_index(call, "mode")
        if i is not None:
            now = literal(call.args[i].value)
            if now is NOT_LITERAL:
                return Refusal(f"mode is set from `{p.code_of(call.args[i].value)}`: set it there")
            if now == mode:
                return Refusal(f"torch.compile already has mode={mode!r}", already=True)
        return Rewrite(
            p.replace(call, set_args(call, {"mode": repr(mode).replace("'", '"')})),
            f'torch.compile(..., mode="{mode}")',
        )


CODEMOD = CompileModel()
