"""A finding's saving in the unit its cost has: ms per step for a per-step cost, seconds of the
job (with its break-even where it has one) for a cost paid once per job or once per epoch. One
place, so that the terminal report, the verdict line and the HTML page say the same thing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchdoctor.record.values import as_float
from torchdoctor.rules.finding import Finding


def _get(f: Finding | Mapping[str, Any], name: str) -> Any:
    return f.get(name) if isinstance(f, Mapping) else getattr(f, name, None)


def seconds(ms: float) -> str:
    """``6.9 s``, ``0.85 s`` or ``42 ms``: a one-off cost in the unit a person reads it in."""
    if ms >= 10_000:
        return f"{ms / 1e3:.0f} s"
    if ms >= 1_000:
        return f"{ms / 1e3:.1f} s"
    if ms >= 100:
        return f"{ms / 1e3:.2f} s"
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"


def _step_ms(f: Finding | Mapping[str, Any]) -> float:
    evidence = _get(f, "evidence") or {}
    step = as_float(evidence.get("mean_step_ms")) if isinstance(evidence, Mapping) else 0.0
    if step > 0:
        return step
    share = as_float(_get(f, "share_of_step"))
    return as_float(_get(f, "saving_ms_per_step")) / share if share > 0 else 0.0


def saving_text(f: Finding | Mapping[str, Any], short: bool = False) -> str | None:
    """``saves up to 2.95 ms per step (32%)`` for a per-step cost (None when it saves nothing);
    for a one-off cost ``costs 6.9 s once per job; repaid only by a job of 690 steps or more``,
    ``costs 1.00 s once per job (72% of a job of 40 steps: max_iters = 40)`` or ``costs 1.2 s
    once per epoch (3% of a 40 s epoch)``; never a share of a step. ``short``: the cost alone
    (for the verdict line)."""
    unit = _get(f, "cost_unit") or "step"
    saving, share = as_float(_get(f, "saving_ms_per_step")), as_float(_get(f, "share_of_step"))
    if unit == "step":
        if saving <= 0:
            return None
        if short:
            return f"saves up to {saving:.1f} ms per step, {share:.0%}"
        return f"saves up to {saving:.2f} ms per step ({share:.0%})"
    cost = as_float(_get(f, "one_off_ms"))
    head = f"costs {seconds(cost)} once per {unit}"
    if short:
        return head
    if unit == "epoch":
        period = as_float(_get(f, "period_ms"))
        return (
            f"{head} ({cost / (period + cost):.0%} of a {seconds(period + cost)} epoch)"
            if (period > 0)
            else head
        )
    tail: list[str] = []
    steps, basis = _get(f, "spread_steps"), str(_get(f, "spread_basis") or "")
    step = _step_ms(f)
    breaks_even = as_float(_get(f, "break_even_steps"))
    if breaks_even > 0:
        tail.append(f"repaid only by a job of {breaks_even:.0f} steps or more")
    if isinstance(steps, int) and steps > 0 and step > 0 and "unknown" not in basis:
        job = steps * step + cost
        tail.append(f"{cost / job:.0%} of a job of {steps} steps ({basis})")
    elif basis:
        tail.append(basis)
    return head + ("; " + "; ".join(tail) if tail else "")
