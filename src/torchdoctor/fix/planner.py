"""From findings to changes: ask each finding's codemods where to rewrite, rewrite each place
on the original file, and compose the changes of one file in order.

Every change is first made alone against the original (its own diff, and the arm ``--prove``
measures it in); composing replays the edits one after another, each anchored through the
line map of the edits before it. An edit that no longer applies on top of the others is
reported as conflicting, never silently dropped.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from torchdoctor.fix import diff
from torchdoctor.fix.context import FixContext
from torchdoctor.fix.model import Change, FindingRef, Refusal, Rewrite, Status, Switch, Target
from torchdoctor.fix.registry import codemod, codemods_for


@dataclass(frozen=True)
class Plan:
    """Every change fix considered, and the files they touch."""

    changes: tuple[Change, ...]
    originals: dict[str, str] = field(default_factory=dict)
    """Absolute path -> the text every change was made against."""
    cwd: str = "."
    notes: tuple[str, ...] = ()

    def get(self, change_id: str) -> Change:
        return next(c for c in self.changes if c.id == change_id)

    @property
    def patched(self) -> list[Change]:
        """The changes that go into the patch."""
        return [c for c in self.changes if c.status == "patched"]

    @property
    def switched(self) -> list[Change]:
        """The changes the script's own command-line settings make (no edit)."""
        return [c for c in self.changes if c.status == "switch"]


def within_noise(finding: FindingRef) -> str | None:
    """Why fix does not propose a change for ``finding`` unless asked (``--all``), or None:
    one whose predicted saving is under the noise floor (1% of the step,
    ``rules.thresholds.NOISE_FLOOR``) is an edit to the user's code for no gain anyone can
    measure; an info finding (its saving under ``WARNING_SHARE``, or doubtful) is not worth an
    unasked edit either."""
    from torchdoctor.rules.thresholds import NOISE_FLOOR, WARNING_SHARE

    sp = finding.predicted_speedup
    step = finding.step_ms
    predicted = f"predicted {sp:.2f}x" if sp is not None else "no saving estimated"
    if sp is not None and step is not None and finding.saving_ms_per_step < NOISE_FLOOR * step:
        return f"within noise ({predicted})"
    if finding.severity == "info":
        loud = (
            sp is not None
            and step is not None
            and finding.saving_ms_per_step >= WARNING_SHARE * step
        )
        return f"info ({predicted})" if loud else f"info, within noise ({predicted})"
    return None


def _guarded_plan(
    cm_id: str, finding: FindingRef, ctx: FixContext
) -> list[Target | Refusal | Switch]:
    try:
        return list(codemod(cm_id).plan(finding, ctx))
    except Exception as exc:  # a codemod bug never ends fix: that one finding is refused
        if os.environ.get("TORCHDOCTOR_DEBUG"):
            raise
        return [Refusal(f"internal error in {cm_id}: {type(exc).__name__}: {exc}")]


def rewrite(target: Target, source: str) -> Rewrite | Refusal:
    """The target's codemod on ``source``; an exception becomes a refusal with its text."""
    try:
        return codemod(target.codemod).rewrite(source, target)
    except Exception as exc:
        if os.environ.get("TORCHDOCTOR_DEBUG"):
            raise
        return Refusal(f"internal error in {target.codemod}: {type(exc).__name__}: {exc}")


def plan(findings: Sequence[FindingRef], ctx: FixContext) -> Plan:
    """One change per (finding, codemod, place); the same edit asked by two findings is one
    change (``also`` names the other)."""
    changes: list[Change] = []
    by_key: dict[tuple[str, str, int, str], int] = {}
    for finding in findings:
        for cm_id in codemods_for(finding.id):
            for item in _guarded_plan(cm_id, finding, ctx):
                n = len(changes) + 1
                if isinstance(item, Refusal):
                    changes.append(_refused(f"c{n}", cm_id, finding, item))
                    continue
                if isinstance(item, Switch):
                    key = (cm_id, item.file, item.line, repr(item.args))
                else:
                    key = (item.codemod, item.file, item.line, repr(sorted(item.params.items())))
                if key in by_key:
                    k = by_key[key]
                    changes[k] = replace(changes[k], also=(*changes[k].also, finding.id))
                    continue
                by_key[key] = len(changes)
                if isinstance(item, Switch):
                    changes.append(_switched(f"c{n}", cm_id, finding, item))
                else:
                    changes.append(_attempt(f"c{n}", item, finding, ctx))
    originals = {c.file: ctx.text(c.file) for c in changes if c.file and c.target is not None}
    return Plan(tuple(changes), originals, ctx.cwd)


def _refused(cid: str, cm_id: str, finding: FindingRef, r: Refusal) -> Change:
    status: Status = "already" if r.already else "refused"
    return Change(cid, cm_id, finding, status, r.reason, r.file, r.line)


def _switched(cid: str, cm_id: str, finding: FindingRef, s: Switch) -> Change:
    return Change(cid, cm_id, finding, "switch", "", s.file, s.line, s.summary, switch=s)


def _attempt(cid: str, target: Target, finding: FindingRef, ctx: FixContext) -> Change:
    original = ctx.text(target.file)
    result = rewrite(target, original)
    precision = codemod(target.codemod).precision
    if isinstance(result, Refusal):
        status: Status = "already" if result.already else "refused"
        return Change(cid, target.codemod, finding, status, result.reason, target.file, target.line)
    try:
        compile(result.source, target.file, "exec")
    except SyntaxError as exc:  # never hand out a patch that does not parse
        return Change(
            cid,
            target.codemod,
            finding,
            "refused",
            f"internal error: the edit does not compile ({exc.msg})",
            target.file,
            target.line,
        )
    return Change(
        cid,
        target.codemod,
        finding,
        "patched",
        "",
        target.file,
        target.line,
        result.summary,
        precision,
        target,
        diff.unified(target.file, original, result.source, ctx.cwd),
    )


def compose(plan_: Plan, changes: Iterable[Change]) -> tuple[dict[str, str], dict[str, str]]:
    """The files with ``changes`` applied in order: ``(path -> new text, change id -> why it
    did not apply on top of the others)``."""
    current = dict(plan_.originals)
    maps: dict[str, list[object]] = {}
    skipped: dict[str, str] = {}
    for c in changes:
        if c.target is None or c.file is None:
            continue
        line = c.target.line
        for f in maps.get(c.file, []):
            line = f(line)  # type: ignore[operator]
        result = rewrite(replace(c.target, line=line), current[c.file])
        if isinstance(result, Refusal):
            skipped[c.id] = f"does not apply on top of the other changes: {result.reason}"
            continue
        maps.setdefault(c.file, []).append(diff.line_map(current[c.file], result.source))
        current[c.file] = result.source
    changed = {p: t for p, t in current.items() if t != plan_.originals.get(p)}
    return changed, skipped


def patch_of(plan_: Plan, changes: Iterable[Change]) -> str:
    """The unified diff of ``changes`` together."""
    files, _ = compose(plan_, changes)
    return diff.patch_text(plan_.originals, files, plan_.cwd)
