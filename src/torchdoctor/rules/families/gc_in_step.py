"""Garbage collection in the step (``torchdoctor check``): full collections walking every live
Python object, often a ``gc.collect()`` put in the loop "to stop a leak".

Timed exactly by gc callbacks (the line table's ``gc`` column); the housekeeping watch saw every
``gc.collect()`` call and its site, sampled or not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchdoctor.rules import same_cause as sc
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families._run import account
from torchdoctor.rules.sites import short_site
from torchdoctor.rules.spec import FindingSpec, Measured, RunRule, SameCause

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord


def gc_fix(explicit: list[str]) -> str:
    """Collect less often (or not by hand in the loop)."""
    if explicit:
        return (
            f"# delete gc.collect() from the loop (at {explicit[0]}); if memory grows, find what "
            "keeps it (a list of losses as tensors, a graph kept by `total += loss`)"
        )
    return (
        "import gc\n"
        "gc.freeze()  # after building the model and the data: the collector skips them from "
        "then on\n"
        "gc.set_threshold(50_000, 50, 100)  # or collect the young generation less often"
    )


SPEC = FindingSpec(
    id="gc-in-step",
    label="garbage collection in the step",
    title="garbage collection takes {ms:.1f} ms per step ({share:.0%}){how}",
    threshold=th.GC_SHARE,
    fix=gc_fix,
    explanation="A full collection walks every Python object alive (datasets held as lists "
    "of Python objects make it slow); gc.collect() in the loop pays it every step.",
    doc_url="https://docs.python.org/3/library/gc.html#gc.freeze",
    same_cause=(SameCause("housekeeping-in-step", sc.gc_collect_call),),
)


def measure(run: RunRecord) -> Measured | None:
    """Garbage collection's time per step as a share of the step; the lines that collected
    most, and the explicit ``gc.collect()`` calls first."""
    acc, step = account(run), run.step_ms
    if not step:
        return None
    ms = acc.lines.gc_ms_per_step
    rows = [r for r in acc.lines.rows if r.under.get("gc")]
    rows.sort(key=lambda r: -r.under["gc"])
    explicit = [r.site for r in rows if "gc.collect" in r.code]
    called = run.config.housekeeping
    explicit += [
        r.site for r in called if r.what == "gc.collect" and r.site and r.site not in explicit
    ]
    how = f": gc.collect() at {short_site(explicit[0])}" if explicit else " (automatic collections)"
    return Measured(
        value=ms / step,
        saving_ms=ms,
        title={"ms": ms, "share": ms / step, "how": how},
        evidence={
            "gc_ms_per_step": ms,
            "collections": acc.lines.gc_collections,
            "sites": [r.site for r in rows[:5]],
        },
        fix={"explicit": explicit},
        where=tuple(explicit or [r.site for r in rows[:3]]),
    )


RULES = (RunRule(SPEC, measure),)
