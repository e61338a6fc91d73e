"""The finding registry: one entry per finding, trace and run level alike.

Each entry (:class:`~torchdoctor.rules.spec.FindingSpec`) holds the stable id, the label of the
verdict line, the title template, the severity policy, the threshold that fires it (with its
reason, from ``rules/thresholds.py``), the fix builder, the explanation, the docs link, the
``torchdoctor tune`` knobs it points at and its aliases (ids of other findings that describe the
same problem, merged into this one by ``check``). Everything else reads from here: ``Finding``
validates ids against it, the verdict takes its labels, ``tune`` its knobs, ``check`` its
aliases, and docs/rules.md lists it.

Adding a finding
----------------
A finding goes in a family module under ``rules/families/``: its ``FindingSpec`` beside the
function that measures it, as ``RULES = (TraceRule(SPEC, measure),)`` for a trace finding
(called with the ``TraceAnalysis``) or ``RULES = (RunRule(SPEC, measure),)`` for a check run's
(called with the ``RunRecord``); nothing else changes, but for a new module with trace or
ranks rules, which ``rules/families.LISTED`` names (see docs/architecture.md, and
``rules/families/device_copies.py`` and ``rules/families/gc_in_step.py`` for worked examples).
Every finding lives there: the trace findings (``TraceRule``), the run findings
(``RunRule``; ``rules/run_rules.py`` keeps one rule written by hand, host-bound's on a CPU run,
worded by its family's spec), the straggler across ranks (``RanksRule``) and the step's
unexplained time (``AccountRule``). A threshold is a ``Threshold(value, "reason")`` (in
``rules/thresholds.py`` when other stages read it too); a fix that depends on what was measured
is a builder taking typed inputs (``record/run.py`` for run-level ones), a fixed text is
``static("...")``. Test it on a record that fires it and one that does not
(``tests/rules/test_family_<module>.py``); ``tests/core/test_registry.py`` checks that every
entry is complete.
"""

from __future__ import annotations

import functools
from typing import get_args

from torchdoctor.rules import families
from torchdoctor.rules.spec import FamilyRule, FindingSpec, Source

REGISTRY: dict[str, FindingSpec]
"""Every finding by id, in documentation order (trace findings first, the run families last).
Built on first use, importing every family module; ``spec``, ``label`` and ``registered`` look
a trace or ranks finding up in its own families first, so ``analyze`` never imports the run
families."""


def _index(*groups: tuple[FindingSpec, ...]) -> dict[str, FindingSpec]:
    out: dict[str, FindingSpec] = {}
    for spec in (s for g in groups for s in g):
        if spec.id in out:
            raise ValueError(f"finding id {spec.id!r} registered twice")
        out[spec.id] = spec
    return out


@functools.cache
def _registry() -> dict[str, FindingSpec]:
    trace = tuple(r.spec for r in families.FAMILY_RULES)
    # the run families' specs, each once (a family may measure one spec on a trace and on a run)
    run = {id(r.spec): r.spec for r in families.RUN_FAMILY_RULES if r.spec not in trace}
    return _index(
        trace,
        tuple(r.spec for r in families.RANKS_FAMILY_RULES),
        tuple(r.spec for r in families.ACCOUNT_FAMILY_RULES),
        tuple(run.values()),
    )


def __getattr__(name: str) -> dict[str, FindingSpec]:
    if name == "REGISTRY":
        return _registry()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _lookup(fid: str) -> FindingSpec | None:
    """The entry of ``fid``: found among the trace families' rules, then the ranks' (each group
    imported only when the one before does not hold it), else in the whole registry; None when
    unregistered."""
    for kind in families.LISTED:
        found = next((r.spec for r in families.rules(kind) if r.spec.id == fid), None)
        if found is not None:
            return found
    return _registry().get(fid)


def spec(fid: str) -> FindingSpec:
    """The registry entry of a finding id (KeyError names the unknown id)."""
    found = _lookup(fid)
    if found is None:
        raise KeyError(f"unknown finding id {fid!r}")
    return found


def registered(fid: str) -> bool:
    """Whether ``fid`` is a registered finding id."""
    return _lookup(fid) is not None


@functools.cache
def _measured() -> dict[str, set[Source]]:
    kinds: tuple[tuple[Source, tuple[FamilyRule, ...]], ...] = (
        ("trace", families.FAMILY_RULES),
        ("run", families.RUN_FAMILY_RULES),
        ("ranks", families.RANKS_FAMILY_RULES),
        ("run", families.ACCOUNT_FAMILY_RULES),  # the step's account is the run's
    )
    out: dict[str, set[Source]] = {}
    for source, rules in kinds:
        for rule in rules:
            out.setdefault(rule.spec.id, set()).add(source)
    return out


def sources(fid: str) -> tuple[Source, ...]:
    """Which analyses produce a finding (``trace``, ``run``, ``ranks``): those of the rules that
    measure it, and any its spec adds (a rule written by hand)."""
    found = _measured().get(fid, set()) | set(spec(fid).sources)
    return tuple(s for s in get_args(Source) if s in found)


def finding_ids() -> tuple[str, ...]:
    """All registered ids."""
    return tuple(_registry())


def label(fid: str) -> str:
    """The short name for the verdict line (the id with spaces when unregistered)."""
    s = _lookup(fid)
    return s.label if s is not None else fid.replace("-", " ")


def knobs_by_finding() -> dict[str, tuple[str, ...]]:
    """The tune knobs each finding points at (findings with none left out)."""
    return {s.id: s.knobs for s in _registry().values() if s.knobs}


def alias_map() -> dict[str, str]:
    """Finding id -> the id that describes the same problem and is kept when both fire."""
    return {alias: s.id for s in _registry().values() for alias in s.aliases}
