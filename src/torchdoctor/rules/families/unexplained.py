"""Unexplained step time (``torchdoctor check``): the step's account, after every other
finding has claimed its time, leaves much of the step unexplained, far from this machine's
roofline for the step's work. Its line table says where that time goes and what runs there.

Measured on the step's account of one rank's record and the findings merged over every rank
(an ``AccountRule``: ``rules/account_rules.py`` computes the account and builds the finding).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchdoctor.rules import thresholds as th
from torchdoctor.rules.mode_fixes import unexplained_fix
from torchdoctor.rules.sites import short_site
from torchdoctor.rules.spec import AccountRule, FindingSpec, Measured

if TYPE_CHECKING:
    from torchdoctor.rules.account_rules import StepAccount, TopLine

TUNING = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"


def account_fix(lines: list[TopLine], site: str) -> str:
    """What to look at first at each of the (at most three) lines holding the time."""
    text = "\n".join(_line_fix(t.runs, t.site, t.code, list(t.ops)) for t in lines[:3])
    return text or unexplained_fix("Python", site, [])


def _line_fix(runs: str, site: str, code: str, ops: list[str]) -> str:
    """The fix for one top line: a per-element Python loop gets "vectorise this loop"."""
    if runs == "Python":
        from torchdoctor.rules.loop_lines import loop_fix_at

        loop = loop_fix_at(site, code)
        if loop is not None:
            return loop
    return unexplained_fix(runs, short_site(site), ops)


SPEC = FindingSpec(
    id="unexplained-step-time",
    label="unexplained step time",
    title="{share:.0%} of the step ({ms:.1f} ms) is not explained: it runs at {eff} of this "
    "machine's roofline; most time at {site} ({what})",
    threshold=th.UNEXPLAINED_SHARE,
    fix=account_fix,
    explanation="No named cause accounts for this time, and the step is far from what the "
    "hardware can do for its work (its FLOPs and bytes at the measured rates). The line "
    "table says where the time goes and what runs there.",
    doc_url=TUNING,
)


def measure(subject: tuple[StepAccount | None, float | None]) -> Measured | None:
    """The account's unexplained time as a share of its step; saving: that share of the run's
    mean step (``step``). None without an account, or with neither a roofline nor sampled
    lines (nothing to say where the time goes)."""
    a, step = subject
    if a is None or (a.roofline_ms is None and not a.top_lines):
        return None
    top = a.top_lines[0] if a.top_lines else None
    site = (top.site if top else "") or "?"
    runs = top.runs if top else ""
    what = runs + (f": {', '.join(top.ops[:2])}" if top and runs == "torch ops" and top.ops else "")
    eff = f"{a.efficiency:.0%}" if a.efficiency is not None else "an unknown share"
    title: dict[str, Any] = {
        "share": a.unexplained_share,
        "ms": a.unexplained_ms,
        "eff": eff,
        "site": short_site(site),
        "what": what,
    }
    return Measured(
        value=a.unexplained_ms / a.step_ms if a.step_ms > 0 else float("inf"),
        saving_ms=a.unexplained_share * (step or a.step_ms),  # the same share of the mean step
        title=title,
        evidence={"account": a.to_dict()},
        fix={"lines": list(a.top_lines), "site": site},
        where=tuple(t.site for t in a.top_lines[:5] if t.site),
    )


RULES = (AccountRule(SPEC, measure),)
