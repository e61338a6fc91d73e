"""Housekeeping in the step (``torchdoctor check``): ``torch.save``, ``gc.collect()`` or a deep
copy of tensors called from the user's loop in (nearly) every measured step.

The housekeeping watch times each such call exactly, with its site (``run.json``'s
``config.housekeeping``); a finding per call site.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchdoctor.rules import thresholds as th
from torchdoctor.rules.fixes import DOCS
from torchdoctor.rules.spec import FindingSpec, Gate, Measured, RunRule

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord

_WHAT = {
    "torch.save": (
        "torch.save every step",
        "# checkpoint every N steps, not every step{place}:\n"
        "if step % 1000 == 0:\n"
        "    torch.save(model.state_dict(), path)",
    ),
    "copy.deepcopy": (
        "copy.deepcopy of tensors every step",
        "# a snapshot of the weights every step allocates and copies the whole state; take it\n"
        "# when it is needed (at evaluation, every N steps), into the tensors of the first "
        "one{place}:\n"
        "if step % 100 == 0:\n"
        "    with torch.no_grad():\n"
        "        for kept, t in zip(snapshot.values(), model.state_dict().values()):\n"
        "            kept.copy_(t)",
    ),
    "gc.collect": (
        "gc.collect() every step",
        "# Python collects garbage by itself: drop the call from the loop, or keep it "
        "rare{place}:\n"
        "if step % 1000 == 0:\n"
        "    gc.collect()",
    ),
}
"""Each call the watch times: its words in the title, and its fix (the names are the common
ones: ``check`` comments out a statement whose names the script lacks)."""


def housekeeping_fix(call: str, site: str | None = None) -> str:
    """Make the call every N steps (or not at all), in place of the line that makes it."""
    place = f"; in place of the line at {site}" if site else ""
    return _WHAT[call][1].format(place=place)


SPEC = FindingSpec(
    id="housekeeping-in-step",
    label="housekeeping in the step",
    title="{what} at {site}: {ms:.1f} ms per step ({share:.0%})",
    threshold=th.HOUSEKEEPING_SHARE,
    fix=housekeeping_fix,
    explanation="Saving a checkpoint or running a full garbage collection is not training "
    "work; done every step it adds its whole time to every step.",
    doc_url=f"{DOCS}/notes/serialization.html",
    gates=(Gate("calls_per_step", th.HOUSEKEEPING_CALLS),),
)


def measure(run: RunRecord) -> tuple[Measured, ...] | None:
    """Each timed call: its time per step as a share of the step, and how often per step it
    was called. A module deep-copied at a line is repeated-construction's (its buffers' copies
    land here too)."""
    rows = run.config.housekeeping
    measured, step = run.steps.measured_steps, run.step_ms
    if not rows or not measured or not step:
        return None
    from torchdoctor.rules.account_inputs import repeat_sites
    from torchdoctor.rules.sites import relative_site

    modules_copied = repeat_sites(run, "copy")
    out = []
    for r in rows:
        if r.what not in _WHAT or (r.what == "copy.deepcopy" and r.site in modules_copied):
            continue
        ms = r.seconds * 1e3 / measured
        calls = r.calls / measured
        site = relative_site(r.site)
        out.append(
            Measured(
                value=ms / step,
                saving_ms=ms,
                title={"what": _WHAT[r.what][0], "site": site, "ms": ms, "share": ms / step},
                evidence={"calls_per_step": calls, "ms_per_step": ms, "call": r.to_dict()},
                fix={"call": r.what, "site": site},
                where=(r.site,),
                gates={"calls_per_step": calls},
            )
        )
    return tuple(out)


RULES = (RunRule(SPEC, measure),)
