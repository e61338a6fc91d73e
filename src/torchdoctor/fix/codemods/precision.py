"""``bf16-autocast`` and ``tf32-matmul``: tensor-core arithmetic on GPUs that have it (sm80+).

``bf16-autocast`` wraps the forward and the loss of the training step, the statements that
compute the name whose ``.backward()`` is called, in ``torch.autocast(device_type,
dtype=torch.bfloat16)``: not the batch's copy to the device, not ``zero_grad``, not the
backward (autocast is for the forward only). The device type is the script's own: the device
its step copies the batch to (``x.to(device)``: ``torch.device(device).type``), so the same
script still runs where it picks another device (autocast on a device the tensors are not on
does nothing), else ``"cuda"``. bf16 has fp32's range, so no GradScaler is
needed; the fidelity gate then uses tune's bf16 tolerance. A script whose own autocast takes
its dtype from a setting (nanoGPT: ``ptdtype = {...}[dtype]``, ``torch.amp.autocast(...,
dtype=ptdtype)``) gets that setting instead (``--dtype=bfloat16``). ``tf32-matmul`` adds
``torch.set_float32_matmul_precision("high")`` after the imports, and never before the import
of torch (a script that sets the environment first imports it late); the call every torch
from 1.12 on accepts, which 2.9+ maps onto the ``fp32_precision`` settings.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import libcst as cst

from torchdoctor.fix import switches
from torchdoctor.fix.codemods.base import one_call, parse_or_refuse, setting_or_parsed
from torchdoctor.fix.codemods.non_blocking import target_names
from torchdoctor.fix.cst_tools import (
    Parsed,
    contains_call,
    ensure_import,
    full_name,
    insert_after,
    last_import,
    statement,
    with_comment,
    wrap,
)
from torchdoctor.fix.model import FindingRef, Refusal, Rewrite, Switch, Target

if TYPE_CHECKING:
    from torchdoctor.fix.context import FixContext

_MOVES = ("to", "cuda", "pin_memory")


def _is_backward(p: Parsed, node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "backward"
    )


def _loss_name(call: cst.Call) -> str | None:
    """``loss`` of ``loss.backward()`` and of ``scaler.scale(loss).backward()``."""
    assert isinstance(call.func, cst.Attribute)
    obj = call.func.value
    if isinstance(obj, cst.Call) and full_name(obj.func).endswith(".scale") and obj.args:
        obj = obj.args[0].value
    return obj.value if isinstance(obj, cst.Name) else None


def _assigns(stmt: cst.CSTNode, name: str) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for s in stmt.body:
        if isinstance(s, cst.Assign) and any(name in target_names(t.target) for t in s.targets):
            return True
        if isinstance(s, cst.AnnAssign | cst.AugAssign) and full_name(s.target) == name:
            return True
    return False


def _move_calls(stmt: cst.SimpleStatementLine) -> list[Any]:
    """The values of ``x, y = x.to(device), y.to(device)`` (of any assignment's value)."""
    s = stmt.body[0]
    if not isinstance(s, cst.Assign):
        return []
    values = s.value.elements if isinstance(s.value, cst.Tuple) else [s.value]
    return [v.value if isinstance(v, cst.Element) else v for v in values]


def _only_moves(stmt: cst.SimpleStatementLine) -> bool:
    """``x, y = x.to(device), y.to(device)``: copying the batch, not computing on it."""
    exprs = _move_calls(stmt)
    return bool(exprs) and all(
        isinstance(e, cst.Call)
        and isinstance(e.func, cst.Attribute)
        and e.func.attr.value in _MOVES
        for e in exprs
    )


def _device_type(p: Parsed, moves: Sequence[cst.CSTNode], torch: str) -> str:
    """The autocast's ``device_type`` as code: the device the step's batch copies name
    (``x.to(device)``), when they all name the same variable, as ``torch.device(device).type``
    (a string, ``"cuda:0"`` or a ``torch.device`` alike); ``"cuda"`` otherwise."""
    found = set()
    for stmt in moves:
        if not (isinstance(stmt, cst.SimpleStatementLine) and _only_moves(stmt)):
            continue
        for call in _move_calls(stmt):
            arg = next(
                (a for a in call.args if a.keyword is None or a.keyword.value == "device"), None
            )
            value = arg.value if arg is not None else None
            if (
                call.func.attr.value == "to"
                and isinstance(value, cst.Name | cst.Attribute)
                and not full_name(value).startswith(torch + ".")  # a dtype: torch.float32
            ):
                found.add(p.code_of(value))
    return f"{torch}.device({found.pop()}).type" if len(found) == 1 else '"cuda"'


def _is_autocast(p: Parsed, node: cst.CSTNode) -> bool:
    """An ``autocast(...)`` call (any module's), or a ``with`` statement that enters one."""
    if isinstance(node, cst.With):
        return any(_is_autocast(p, i.item) for i in node.items)
    name = full_name(node) if isinstance(node, cst.Call | cst.Name | cst.Attribute) else ""
    return name.rsplit(".", 1)[-1] == "autocast"  # a call's name is its function's


def _dtype_setting(
    p: Parsed, file: str, expr: cst.BaseExpression
) -> tuple[switches.Setting, str] | None:
    """The setting an autocast's ``dtype=`` comes from, and the setting's value for bf16: a
    module-level ``name = {"bfloat16": torch.bfloat16, ...}[setting]`` (nanoGPT's ptdtype)."""
    if not isinstance(expr, cst.Name):
        return None
    try:
        _, value = switches.module_assign(p, expr.value)
    except KeyError:
        return None
    if not (isinstance(value, cst.Subscript) and isinstance(value.value, cst.Dict)):
        return None
    index = value.slice[0].slice if len(value.slice) == 1 else None
    if not isinstance(index, cst.Index):
        return None
    s = switches.setting_of(p, file, index.value)
    keys = [
        el.key.evaluated_value
        for el in value.value.elements
        if isinstance(el, cst.DictElement)
        and isinstance(el.key, cst.SimpleString)
        and full_name(el.value).endswith("bfloat16")
    ]
    return (s, str(keys[0])) if s is not None and keys else None


def _own_dtype_switch(ctx: FixContext) -> Switch | Target | Refusal | None:
    """The script's own autocast, in the dtype a setting picks: that setting set to bf16."""
    found = []
    for f in ctx.files():
        p = ctx.parsed(f)
        for call in p.all(cst.Call) if p is not None else ():
            if _is_autocast(p, call):  # type: ignore[arg-type]
                dtype = next(
                    (a.value for a in call.args if a.keyword and a.keyword.value == "dtype"), None
                )
                got = _dtype_setting(p, f, dtype) if dtype is not None else None  # type: ignore[arg-type]
                if got is not None:
                    found.append(got)
    if len({(s.file, s.line) for s, _ in found}) != 1:
        return None
    s, bf16 = found[0]
    if switches.value_in_run(s, ctx.argv) == bf16:
        return Refusal(f"the script's own autocast already runs in {s.spelled}={bf16!r}")
    switch = switches.switch_to(s, bf16, ctx.argv, ctx.rel(s.file))
    if switch is not None:
        return switch
    return Target(BF16_ID, s.file, s.line, {"setting": s.name, "value": bf16})


BF16_ID = "bf16-autocast"


class Bf16Autocast:
    id = BF16_ID
    title = "bf16 autocast of the forward on bf16 tensor cores"
    precision = "bf16-mixed"

    def plan(self, finding: FindingRef, ctx: FixContext) -> list[Target | Refusal | Switch]:
        if not ctx.cuda:
            return [Refusal("the run's GPU is not known (bf16 autocast only pays on tensor cores)")]
        if not ctx.bf16_tensor_cores:
            return [
                Refusal(
                    "this GPU has no bf16 tensor cores: fp16 with a GradScaler is the remedy, not rewritten"
                )
            ]
        own = _own_dtype_switch(ctx)
        if own is not None:
            return [own]
        return [one_call(self.id, ctx, _is_backward, "a .backward() call")]

    def rewrite(self, source: str, target: Target) -> Rewrite | Refusal:
        p = setting_or_parsed(source, target)
        if not isinstance(p, Parsed):
            return p
        call = next(
            (c for c in p.all(cst.Call) if _is_backward(p, c) and p.spans(c, target.line)), None
        )
        if call is None:
            return Refusal(f"no .backward() call at line {target.line}")
        loss = _loss_name(call)
        stmt = p.statement(call)
        if loss is None or stmt is None or not p.in_block(stmt):
            return Refusal("the backward is not `loss.backward()` on a line of its own")
        if any(_is_autocast(p, a) for a in p.ancestors(stmt)):
            return Refusal("the step already runs under autocast", already=True)
        parent: Any = p.parent[stmt]
        body = list(parent.body)
        i = next(k for k, s in enumerate(body) if s is stmt)
        before = body[:i]
        if any(_is_autocast(p, s) for s in before):
            return Refusal("autocast already wraps the forward", already=True)
        last = next((k for k in range(len(before) - 1, -1, -1) if _assigns(before[k], loss)), None)
        if last is None:
            return Refusal(f"`{loss}` is not computed in the same block as its backward")
        first = last
        while first > 0:
            prev = before[first - 1]
            if not isinstance(prev, cst.SimpleStatementLine) or _only_moves(prev):
                break
            if contains_call(prev, ("zero_grad", "backward", "step")) is not None:
                break
            first -= 1
        torch = p.torch_name() or "torch"
        code = wrap(
            p,
            before[first : last + 1],
            f"with {torch}.autocast(device_type={_device_type(p, before[:first], torch)}, "
            f"dtype={torch}.bfloat16):",
            "torchdoctor: bf16 tensor cores, fp32 range (no GradScaler needed)",
        )
        if p.torch_name() is None:
            code = ensure_import(code, "torch")
        return Rewrite(
            code, f"forward and loss under bf16 autocast ({last - first + 1} statement(s))"
        )


def _imports_torch(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(s, cst.Import)
        and any(full_name(a.name).split(".")[0] == "torch" for a in s.names)
        for s in stmt.body
    )


def _after_torch_import(p: Parsed) -> cst.SimpleStatementLine | None:
    """The leading imports' last statement or, when torch is imported later (the environment
    set first: ``os.environ[...] = ...``, then ``import torch``), the last of the imports that
    follow torch's."""
    anchor = last_import(p)
    body = list(p.module.body)
    rest = body[body.index(anchor) + 1 :] if anchor is not None else []
    start = next((k for k, stmt in enumerate(rest) if _imports_torch(stmt)), None)
    for stmt in rest[start:] if start is not None else ():
        if not (
            isinstance(stmt, cst.SimpleStatementLine)
            and all(isinstance(s, cst.Import | cst.ImportFrom) for s in stmt.body)
        ):
            break
        anchor = stmt
    return anchor


_OWN = re.compile(r"set_float32_matmul_precision\(|matmul\.(allow_tf32|fp32_precision)\s*=")
_TF32_ON = re.compile(r"""(["'](high|medium|tf32)["']|=\s*True)""")
"""The script's own fp32 matmul setting (torch's three spellings), and one that allows TF32."""


class Tf32Matmul:
    id = "tf32-matmul"
    title = "TF32 for fp32 matmuls"
    precision = "tf32"

    def plan(self, finding: FindingRef, ctx: FixContext) -> list[Target | Refusal]:
        if not (ctx.cuda and ctx.tf32_capable):
            return [Refusal("TF32 needs an sm80+ GPU; the run's GPU is not one (or not known)")]
        if not ctx.script:
            return [Refusal("no script to set it in")]
        return [Target(self.id, ctx.script, 1)]

    def rewrite(self, source: str, target: Target) -> Rewrite | Refusal:
        p = parse_or_refuse(source)
        if isinstance(p, Refusal):
            return p
        text = source
        own = [(i, ln.strip()) for i, ln in enumerate(text.splitlines(), 1) if _OWN.search(ln)]
        if own and _TF32_ON.search(own[-1][1]):
            return Refusal("the script already sets the fp32 matmul precision", already=True)
        if own:  # a line of its own after ours would turn TF32 off again
            return Refusal(
                f"the script sets the fp32 matmul precision itself (line {own[-1][0]}: "
                f"`{own[-1][1]}`): allow TF32 there"
            )
        if p.torch_name() is None:
            text = ensure_import(text, "torch")
            p = Parsed(text)
        anchor = _after_torch_import(p)
        if anchor is None:
            return Refusal("the script has no module-level import to place it after")
        torch = p.torch_name() or "torch"
        new = with_comment(
            statement(f'{torch}.set_float32_matmul_precision("high")\n'),  # type: ignore[arg-type]
            "torchdoctor: TF32 tensor cores for fp32 matmuls",
        )
        new = new.with_changes(leading_lines=[cst.EmptyLine()])  # set apart from the imports
        return Rewrite(insert_after(p, anchor, [new]), 'torch.set_float32_matmul_precision("high")')


BF16 = Bf16Autocast()
TF32 = Tf32Matmul()
