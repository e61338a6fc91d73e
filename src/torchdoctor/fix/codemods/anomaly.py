"""``anomaly-off``: autograd anomaly detection turned off outside debugging.

``torch.autograd.set_detect_anomaly(True)`` records a Python stack for every operator of the
forward and checks every backward output for NaN: a debugging aid that costs the whole run.
The call (or ``with torch.autograd.detect_anomaly():``) becomes ``set_detect_anomaly(False)``
with a comment, so it stays one edit away for the next debugging session. A mode the script
computes (``set_detect_anomaly(args.debug)``) is already off outside debugging: not rewritten.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdoctor.fix.codemods.base import located_targets, one_call, parse_or_refuse
from torchdoctor.fix.cst_tools import Parsed, literal, with_comment
from torchdoctor.fix.model import FindingRef, Refusal, Rewrite, Target

if TYPE_CHECKING:
    from torchdoctor.fix.context import FixContext

SET = ("torch.autograd.set_detect_anomaly", "torch.autograd.anomaly_mode.set_detect_anomaly")
CONTEXT = ("torch.autograd.detect_anomaly", "torch.autograd.anomaly_mode.detect_anomaly")
COMMENT = "torchdoctor: anomaly detection slows every step; True only while debugging"


def is_anomaly_call(p: Parsed, node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and (
        p.is_call_to(node, SET, "set_detect_anomaly")
        or p.is_call_to(node, CONTEXT, "detect_anomaly")
    )


def _sites(finding: FindingRef) -> list[str]:
    ev = finding.evidence
    rows = ev.get("sites") if isinstance(ev.get("sites"), list) else []
    out = [str(r.get("site") if isinstance(r, dict) else r) for r in rows or []]
    if isinstance(ev.get("site"), str):
        out.append(ev["site"])
    return [s for s in dict.fromkeys([*out, *finding.where]) if s and s != "None"]


class AnomalyOff:
    id = "anomaly-off"
    title = "autograd anomaly detection off outside debugging"
    precision = "fp32"

    def plan(self, finding: FindingRef, ctx: FixContext) -> list[Target | Refusal]:
        sites = _sites(finding)
        if sites:
            return located_targets(self.id, ctx, sites[:4])
        return [
            one_call(self.id, ctx, is_anomaly_call, "a set_detect_anomaly / detect_anomaly call")
        ]

    def rewrite(self, source: str, target: Target) -> Rewrite | Refusal:
        p = parse_or_refuse(source)
        if isinstance(p, Refusal):
            return p
        calls = [c for c in p.all(cst.Call) if is_anomaly_call(p, c) and p.spans(c, target.line)]
        if not calls:
            return Refusal(f"no set_detect_anomaly / detect_anomaly call at line {target.line}")
        call = calls[0]
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "detect_anomaly":
            new_func: cst.BaseExpression = func.with_changes(attr=cst.Name("set_detect_anomaly"))
            args = [
                cst.Arg(
                    cst.Name("False"), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                )
                if call.args
                else cst.Arg(cst.Name("False")),
                *call.args,
            ]
            new = call.with_changes(func=new_func, args=args)
        elif isinstance(func, cst.Name) and func.value == "detect_anomaly":
            return Refusal(
                "detect_anomaly is imported by name: change it to set_detect_anomaly(False)"
            )
        else:
            if not call.args:
                return Refusal("set_detect_anomaly() without a mode")
            mode = literal(call.args[0].value)
            if mode is False:
                return Refusal("anomaly detection is already off", already=True)
            if mode is not True:
                return Refusal(
                    f"the mode comes from `{p.code_of(call.args[0].value)}`: already off "
                    "outside debugging",
                    already=True,
                )
            args = list(call.args)
            args[0] = args[0].with_changes(value=cst.Name("False"))
            new = call.with_changes(args=args)
        stmt = p.statement(call)
        if isinstance(stmt, cst.SimpleStatementLine) and stmt.trailing_whitespace.comment is None:
            new_stmt = with_comment(stmt.deep_replace(call, new), COMMENT)  # type: ignore[arg-type]
            return Rewrite(p.replace(stmt, new_stmt), "set_detect_anomaly(False)")
        return Rewrite(p.replace(call, new), "set_detect_anomaly(False)")


CODEMOD = AnomalyOff()
