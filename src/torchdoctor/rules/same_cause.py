"""One finding per cause: two findings of different ids that one cause fired at the same site are
folded into one.

The registry's aliases (``FindingSpec.aliases``) merge every finding of one id into another;
the pairs an entry declares (``FindingSpec.same_cause``, with one of the tests here) merge only
when the two point at the same site by the same mechanism, since the general finding may also
fire alone for another cause (garbage collection the interpreter starts by itself; a long step
from an evaluation). The more specific finding is kept (it names
the line or the setting to change), the other's evidence is folded into it (under
``<id>_evidence``), its places are added, and the saving never counts one millisecond twice:
the larger of the two where both timed the same thing (a ``gc.collect()`` call and the
collection it ran), their sum where they timed disjoint parts of the step by construction (an
epoch start's wait for its first batch, and the rest of the long step beyond that wait).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from torchdoctor.rules import registry
from torchdoctor.rules.spec import SEVERITIES

if TYPE_CHECKING:
    from torchdoctor.rules.finding import Finding


def _site(text: str) -> str:
    """``path:line`` of a ``where`` entry (``path:line in function``)."""
    return text.split(" in ")[0].strip()


def gc_collect_call(specific: Finding, general: Finding, record: dict[str, Any]) -> bool:
    """``housekeeping-in-step``'s ``gc.collect()`` and ``gc-in-step`` naming that call's line."""
    call = specific.evidence.get("call")
    if not isinstance(call, dict) or call.get("what") != "gc.collect":
        return False
    return str(call.get("site")) in {_site(w) for w in general.where}


def _loader_sites(record: dict[str, Any]) -> set[str]:
    """The lines of the run that iterate a DataLoader (``for x in loader``), as watched."""
    from torchdoctor.record.run import RunRecord

    run = RunRecord.from_dict(record)
    sites = {r.site for r in run.repeats if r.kind == "dataloader iterator" and r.site}
    for row in run.lines.rows:
        calls = [c for c, _ in row.calls]
        if any("DataLoader.__iter__" in c or "DataLoaderIter.__next__" in c for c in calls):
            sites.add(row.site)
    return sites


def _long_steps_at(general: Finding, record: dict[str, Any], sites: set[str]) -> bool:
    """Most of ``rare-long-steps``' excess (over the median) in the long steps the watcher
    sampled was in steps that spent most of their samples at one of ``sites`` (the other long
    steps are noise of a busy machine). A long step with no sample is left out: the watcher
    judged it by the median of the steps before it as it ran and did not see it run long (under
    load, steps of a few times the final median), so nothing says where it ran."""
    from torchdoctor.record.run import RunRecord

    samples = RunRecord.from_dict(record).monitor.long_step_samples
    median = float(general.evidence.get("median_step_ms") or 0.0)
    at, total = 0.0, 0.0
    for row in general.evidence.get("long_steps") or []:
        if not isinstance(row, dict):
            continue
        counts: dict[str, int] = {}
        for r in samples.get(str(row.get("step"))) or []:
            stack = (r.get("stack") or []) if isinstance(r, dict) else []
            if stack:  # the innermost user line
                line = _site(str(stack[0]))
                counts[line] = counts.get(line, 0) + int(r.get("samples") or 0)
        if not counts:
            continue
        excess = max(0.0, float(row.get("ms") or 0.0) - median)
        total += excess
        if max(counts, key=lambda k: counts[k]) in sites:
            at += excess
    return total > 0 and at >= 0.5 * total


def epoch_restart(specific: Finding, general: Finding, record: dict[str, Any]) -> bool:
    """``dataloader-config`` for workers started again every epoch, and ``rare-long-steps``
    whose long steps were spent at the loop's ``for ... in loader`` line: the epoch starts."""
    if not specific.evidence.get("restart_ms_per_step"):
        return False
    return _long_steps_at(general, record, _loader_sites(record))


def iterator_rebuilt(specific: Finding, general: Finding, record: dict[str, Any]) -> bool:
    """``repeated-construction`` of a DataLoader iterator (a new epoch, its workers started
    again) and ``rare-long-steps`` spent at that line."""
    sites = {
        str(c.get("site"))
        for c in specific.evidence.get("constructions") or []
        if isinstance(c, dict) and c.get("kind") == "dataloader iterator"
    }
    return bool(sites) and _long_steps_at(general, record, sites)


def host_time_at_the_work(specific: Finding, general: Finding, record: dict[str, Any]) -> bool:
    """``work-beside-step`` at a line, and ``host-bound`` whose tiny operators are mostly that
    line's (it names the line first) and whose saving that work covers: printing tensors
    formats them with thousands of small operators; compiling the model would not touch it."""
    if not general.where or specific.saving_ms_per_step < general.saving_ms_per_step:
        return False
    return _site(general.where[0]) in {_site(w) for w in specific.where}


def fold(kept: Finding, other: Finding, disjoint: bool = False) -> Finding:
    """``kept`` with ``other``'s evidence and places and the higher severity; the larger saving,
    or with ``disjoint`` the sum of both (a share of the step at most 1)."""
    if disjoint:
        saving = kept.saving_ms_per_step + other.saving_ms_per_step
        step = saving / max(kept.share_of_step + other.share_of_step, 1e-12)
        share = min(1.0, kept.share_of_step + other.share_of_step)
        saving = min(saving, step) if share >= 1.0 else saving
    else:
        best = max((kept, other), key=lambda f: f.saving_ms_per_step)
        saving, share = best.saving_ms_per_step, best.share_of_step
    return dataclasses.replace(
        kept,
        saving_ms_per_step=saving,
        share_of_step=share,
        severity=min(kept.severity, other.severity, key=SEVERITIES.index),
        evidence={**kept.evidence, f"{other.id}_evidence": other.evidence},
        where=list(dict.fromkeys([*kept.where, *other.where])),
    )


def fold_same_cause(findings: list[Finding], record: dict[str, Any] | None) -> list[Finding]:
    """``findings`` with each finding folded into the first of its entry's ``same_cause``
    findings that one cause fired with it (``FindingSpec.same_cause``, in its order)."""
    out = list(findings)
    for spec in (s for s in registry.REGISTRY.values() if s.same_cause):
        for other in [f for f in out if f.id == spec.id]:
            for c in spec.same_cause:
                same = (
                    i
                    for i, f in enumerate(out)
                    if f.id == c.kept and c.same(f, other, record or {})
                )
                match = next(same, None)
                if match is not None:
                    out[match] = fold(out[match], other, c.disjoint)
                    out = [f for f in out if f is not other]
                    break
    return out
