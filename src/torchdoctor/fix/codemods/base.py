"""The shape of a codemod: ``plan`` finds where (from the finding and the run), ``rewrite``
edits one file's source there, or says why not.

``plan`` runs on the original files; ``rewrite`` may run on a file another change already
edited (the planner composes changes), so it finds its node again from the target's line
(mapped through the earlier edits) and never relies on a node found by ``plan``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import libcst as cst

from torchdoctor.fix import sources, switches
from torchdoctor.fix.cst_tools import Parsed
from torchdoctor.fix.model import FindingRef, Precision, Refusal, Rewrite, Switch, Target

if TYPE_CHECKING:
    from torchdoctor.fix.context import FixContext


class Codemod(Protocol):
    """One remedy as a concrete syntax tree edit."""

    id: str
    """Stable id, named by the finding registry's ``codemods`` field."""
    title: str
    """What it changes, in a few words (docs and the report)."""
    precision: Precision
    """The arithmetic after the change (the fidelity gate's tolerance)."""

    def plan(self, finding: FindingRef, ctx: FixContext) -> Sequence[Target | Refusal | Switch]:
        """Where to rewrite for this finding (one target per place), the script's own switch
        that does it (no edit), or why nowhere."""
        ...

    def rewrite(self, source: str, target: Target) -> Rewrite | Refusal:
        """The file's new source with the edit at ``target``, or a refusal (``already`` when
        the code already does it: a second run changes nothing)."""
        ...


@dataclass(frozen=True)
class Hit:
    """A node a codemod's search found in one of the user's files."""

    file: str
    line: int
    node: cst.CSTNode


def search(
    ctx: FixContext, files: Iterable[str], match: type[cst.CSTNode], keep: object
) -> list[Hit]:
    """Nodes of type ``match`` in ``files`` for which ``keep(parsed, node)`` is true."""
    hits = []
    for f in files:
        p = ctx.parsed(f)
        if p is None:
            continue
        for node in p.all(match):
            if keep(p, node):  # type: ignore[operator]
                hits.append(Hit(f, p.line(node), node))
    return hits


def one_site(hits: list[Hit], ctx: FixContext, what: str) -> Hit | Refusal:
    """The single hit, or a refusal naming none or every candidate."""
    if not hits:
        shown = ", ".join(ctx.rel(f) for f in ctx.files()) or "no user file"
        return Refusal(f"no {what} found in the user's files ({shown}): built by a library?")
    if len(hits) > 1:
        where = ", ".join(f"{ctx.rel(h.file)}:{h.line}" for h in hits[:4])
        return Refusal(f"{len(hits)} candidate sites for {what} ({where}): cannot tell which one")
    return hits[0]


def one_call(
    codemod: str, ctx: FixContext, keep: object, what: str, params: dict[str, Any] | None = None
) -> Target | Refusal:
    """A target at the single call in the user's files that ``keep(parsed, node)`` accepts,
    or :func:`one_site`'s refusal."""
    hit = one_site(search(ctx, ctx.files(), cst.Call, keep), ctx, what)
    return hit if isinstance(hit, Refusal) else Target(codemod, hit.file, hit.line, params or {})


def library_refusal(path: str, what: str, ctx: FixContext) -> Refusal:
    return Refusal(
        f"{what} comes from library code ({ctx.rel(path)}): only the user's own files are "
        "rewritten",
        path,
    )


def located(ctx: FixContext, site: str) -> tuple[str, int] | Refusal:
    """A recorded site as ``(file, line)`` in a user file, or the refusal that says why not."""
    found = ctx.site(site)
    if found is None:
        return Refusal(f"the recorded site {site} is not a file here")
    if sources.is_library(found[0]):
        return library_refusal(found[0], "the code at " + site, ctx)
    return found


def located_targets(fix_id: str, ctx: FixContext, sites: Sequence[str]) -> list[Target | Refusal]:
    """Each recorded site as a target of ``fix_id`` in a user file, or the refusal that says
    why not (:func:`located`)."""
    out: list[Target | Refusal] = []
    for site in sites:
        where = located(ctx, site)
        out.append(where if isinstance(where, Refusal) else Target(fix_id, *where))
    return out


def parse_or_refuse(source: str) -> Parsed | Refusal:
    try:
        return Parsed(source)
    except Exception as exc:  # libcst's ParserSyntaxError and friends
        return Refusal(f"the file does not parse: {type(exc).__name__}")


def setting_or_parsed(source: str, target: Target) -> Parsed | Rewrite | Refusal:
    """A target that names a setting of the script gets that setting's default edited
    (``fix/switches.py``); any other, the parsed source (or the refusal that says why not)."""
    if "setting" in target.params:
        return switches.edit_default(
            source, target.params["setting"], target.line, target.params["value"]
        )
    return parse_or_refuse(source)
