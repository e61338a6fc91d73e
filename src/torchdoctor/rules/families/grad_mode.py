"""Autograd graphs recorded for nothing (``torchdoctor check``): outermost forwards run with
grad mode on whose outputs never reach a backward (an evaluation, inference or metrics pass).

The forward watch (``capture/forwards.py``) says which forwards' graphs no backward used. The
saving is measured where ``check`` ran those forwards without grad mode for a few extra steps
(and judged as a mode's, ``_run.measured_gain``); elsewhere (--full, torchrun) it is the estimate ``NO_GRAD_SAVING`` of their time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families._run import (
    account,
    code_at,
    gain_verdict,
    toggled,
    why_not_measured,
)
from torchdoctor.rules.sites import short_site
from torchdoctor.rules.spec import FindingSpec, Measured, RunRule

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord


def no_grad_fix(sites: list[str], code: dict[str, str] | None = None) -> str:
    """Run the forwards whose outputs never reach a backward without autograd."""
    code = code or {}
    out = []
    for site in sites[:3]:
        line = code.get(site) or "outputs = model(inputs)"
        out.append(f"with torch.inference_mode():  # at {site}\n    {line}")
    out.append(
        "# torch.no_grad() instead when the outputs feed autograd later; model.eval() for "
        "dropout and batch norm"
    )
    return "\n".join(out)


SPEC = FindingSpec(
    id="grad-without-backward",
    label="autograd graphs recorded for nothing",
    title="{n} forward(s) per step record an autograd graph no backward uses ({sites}){measured}",
    fix=no_grad_fix,
    codemods=("inference-mode",),
    explanation="With grad mode on, every forward operator saves what its backward would "
    "need and builds a graph node; when no backward ever runs through the output (an "
    "evaluation, inference or metrics forward) that work and memory are wasted.",
    doc_url=f"{fx.DOCS}/generated/torch.autograd.grad_mode.inference_mode.html",
)


def measure(run: RunRecord) -> Measured | None:
    """The forwards whose recorded graphs never reached a backward (any one fires)."""
    acc, step = account(run), run.step_ms
    unreached = acc.forwards.unreached
    if not unreached or not step:
        return None
    sites = [r.site for r in unreached]
    saving, text, ev = toggled(acc, SPEC.id, step)
    estimated = saving is None
    if saving is None:  # not measured (--full, torchrun, skipped): the estimate
        saving = th.NO_GRAD_SAVING * sum(acc.lines.inclusive_ms(site) for site in sites)
        text = (
            f" (estimated at {th.NO_GRAD_SAVING:.0%} of their time; not measured: "
            f"{why_not_measured(acc, SPEC.id)})"
        )
    # Measured without a clear gain (a forward of large operators gains little on a CPU; the
    # modes' rule, ``_run.measured_gain``): for the record; the graph still holds the
    # activations in memory until it is freed.
    gain, verdict = gain_verdict(acc, SPEC.id, step)
    little = gain is False
    calls = sum(r.graphs for r in unreached)
    return Measured(
        value=float(calls),
        saving_ms=saving,
        title={
            "n": calls,
            "sites": ", ".join(short_site(x) for x in sites[:2]),
            "measured": text + verdict if little else text,
        },
        evidence={
            "forwards": [r.raw for r in unreached],
            "sites": sites,
            "estimated": estimated,
            **ev,
        },
        fix={"sites": sites, "code": {site: code_at(acc, site) or "" for site in sites}},
        where=tuple(sites),
        most="info" if little else None,
    )


RULES = (RunRule(SPEC, measure),)
