"""Work beside the step (``torchdoctor check``): time in the loop that is not the model's
forward or backward, the optimizer's step or the input (a copy of the weights, a state dict,
an average updated tensor by tensor, tensors printed), found in the sampled line table.

Whose work each sampled call is: ``rules/aside_rules.py``. A finding per helper function (or
per line of the loop that makes such a call).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchdoctor.rules import thresholds as th
from torchdoctor.rules.fixes import DOCS
from torchdoctor.rules.spec import FindingSpec, Gate, Measured, RunRule

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord


def beside_fix(function: str, site: str, code: str, kind: str, loop: Any = None) -> str:
    """A per-element Python loop vectorised; else by what the work is (``kind``)."""
    if loop is not None:
        from torchdoctor.rules.loop_lines import vectorise_fix

        return vectorise_fix(loop)
    return _fix(function, site, code, kind)


SPEC = FindingSpec(
    id="work-beside-step",
    label="work beside the step",
    title="{what} at {site} ({function}): {ms:.1f} ms per step ({share:.0%}), outside the "
    "model's forward, backward and the optimizer's step",
    threshold=th.ASIDE_SHARE,
    fix=beside_fix,
    explanation="Time in the loop that is not the model's forward or backward, the "
    "optimizer's step or the input: a copy of the weights, a state dict, an average of "
    "the parameters updated tensor by tensor. Done every step it adds its whole time to "
    "every step, and neither the roofline nor a trace calls it waste: the copies are real "
    "work, only not training's.",
    doc_url=f"{DOCS}/optim.html#weight-averaging-swa-and-ema",
    gates=(Gate("samples", th.ASIDE_MIN_SAMPLES),),
)


def measure(run: RunRecord) -> tuple[Measured, ...] | None:
    """Each helper (or loop line) beside the step: its sampled time per step as a share of the
    mean step, and the samples behind it. Deep copies timed exactly at their line are
    housekeeping-in-step's; constructions repeated at a line (a module deep-copied, an
    optimizer rebuilt) are repeated-construction's."""
    table, step = run.lines, run.step_ms
    if not table.rows or not step or not table.ms_per_step:
        return None
    from torchdoctor.rules.account_inputs import repeat_sites
    from torchdoctor.rules.aside_rules import groups, what_of
    from torchdoctor.rules.loop_lines import loop_line_of
    from torchdoctor.rules.sites import relative_site

    # The table's ms per step are of its own (median-based) step: as shares of the mean step.
    scale = step / table.ms_per_step
    timed = {r.site for r in run.config.housekeeping if r.what == "copy.deepcopy"}
    timed |= repeat_sites(run)
    out = []
    for group in groups(table):
        if any(r.site in timed for r, _ in group.rows):
            continue
        ms = group.ms * scale
        top = group.top
        site = relative_site(top.site)
        what, kind = what_of(group)
        loop = loop_line_of(top, table.ms_per_step)
        if loop is not None:  # a per-element Python loop, not an update of a list of tensors
            what = f"a per-element Python loop ({what.partition('(')[2].rstrip(')')})"
        function = "top level" if group.function == "<module>" else group.function
        samples = table.samples_in(group.ms)
        out.append(
            Measured(
                value=ms / step,
                saving_ms=ms,
                title={
                    "what": what,
                    "function": function,
                    "site": site,
                    "ms": ms,
                    "share": ms / step,
                },
                evidence={
                    "function": group.function,
                    "lines": [
                        {
                            "site": r.site,
                            "code": r.code,
                            "ms_per_step": round(m * scale, 4),
                            "calls": [[c, ms] for c, ms in r.calls],
                            "ops": [[o, ms] for o, ms in r.ops],
                        }
                        for r, m in group.rows
                    ],
                    "samples": round(samples, 1),
                },
                fix={
                    "function": function,
                    "site": site,
                    "code": top.code,
                    "kind": kind,
                    "loop": loop,
                },
                where=tuple(r.site for r, _ in group.rows),
                gates={"samples": samples},
            )
        )
    return tuple(out)


def _fix(function: str, site: str, code: str, kind: str) -> str:
    """Run it less often, into kept tensors, or as one foreach call."""
    where = f"# {function} at {site}: {code}" if code else f"# {function} at {site}"
    own = _statement(code)
    if kind == "print":
        if own:
            return (
                f"{where}\n# print or log every N steps (and a number, not a tensor); in place "
                f"of the line at {site}:\nif step % 100 == 0:\n    {own}"
            )
        return (
            f"{where}\n# print or log every N steps, and a number, not a tensor:\n"
            "if step % 100 == 0:\n"
            "    print(f'step {step} loss {loss.item():.4f}')"
        )
    if kind == "copy":
        return (
            f"{where}\n"
            "# copy the state only when the copy is needed (at evaluation, every N steps), and\n"
            "# into the tensors kept from the first copy (no new state allocated each time):\n"
            "if step % 100 == 0:\n"
            "    with torch.no_grad():\n"
            "        for kept, t in zip(snapshot.values(), model.state_dict().values()):\n"
            "            kept.copy_(t)"
        )
    if kind == "update":
        return (
            f"{where}\n"
            "# one foreach call updates a whole list of tensors (an EMA: e = d * e + (1 - d) * p):\n"
            "with torch.no_grad():\n"
            "    torch._foreach_lerp_(ema_params, model_params, 1 - decay)  # lists of tensors\n"
            "# or keep the average with torch.optim.swa_utils.AveragedModel(\n"
            "#     model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(decay));\n"
            "# other updates: torch._foreach_copy_, _foreach_mul_, _foreach_add_ on lists"
        )
    if own:
        return (
            f"{where}\n# run it every N steps, not every step; in place of the line at {site}:\n"
            f"if step % 100 == 0:\n    {own}"
        )
    return f"{where}\n# run it every N steps, not every step (under `if step % 100 == 0:`)"


def _statement(code: str) -> str:
    """The user's line as one statement to put under a condition ('' when it is not one: a
    block header, the first line of a longer statement, a ``return``)."""
    import ast

    text = (code or "").strip()
    try:
        body = ast.parse(text).body
    except SyntaxError:
        return ""
    if len(body) != 1 or not isinstance(body[0], ast.Expr | ast.Assign | ast.AugAssign):
        return ""
    return ast.unparse(body[0])


RULES = (RunRule(SPEC, measure),)
