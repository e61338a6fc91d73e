"""The shape of a registry entry: what a finding is, how severe it gets, how its fix is built.

See ``rules/registry.py`` for how to add a finding.

``analyze`` imports this module (through the trace families) before it reads a trace, so its
small immutable parts are named tuples: Python 3.11 compiles six functions for each frozen
dataclass at import (about 1 ms for a two-field one on a busy 2-core machine, a named tuple
0.15 ms). ``FindingSpec`` and ``Measured`` are compared by identity (``eq=False``: no generated
``__eq__`` and ``__hash__``; nothing compares two of them by value, and a spec is one object
shared by every rule that measures it): defining this module took 31.8M instructions with them,
28.6M without (callgrind, Python 3.11). The annotations are evaluated, not strings: a named
tuple compiles each string annotation (about 0.4M instructions a field), so the few names used
before their class exists are quoted instead.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, get_args

from torchdoctor.rules import thresholds as th
from torchdoctor.rules.thresholds import Threshold

Severity = Literal["critical", "warning", "info"]
SEVERITIES: tuple[str, ...] = get_args(Severity)

Source = Literal["trace", "run", "ranks"]
"""Where a finding comes from: one trace (analyze), a check run's record, or a folder of ranks."""

ProbeScaling = Literal["host", "kernel", "unscaled", "data"]
"""How ``check`` brings a finding's saving from the instrumented window to the clean step
(``rules/probe_effect.py``): ``host`` scales it by how much smaller the clean step's host part
is; ``kernel`` keeps it on a GPU (GPU kernel time as the trace measured it: the profiler does
not slow kernels); ``unscaled`` keeps it always (judged on un-instrumented steps, a one-off cost
of the job, or a risk rather than time); ``data`` takes the clean window's own data wait."""

FixBuilder = Callable[..., str]
"""Builds the code to paste from typed inputs (the rule passes what it measured)."""

Framework = Literal["lightning", "transformers"]
"""A training framework whose own settings a fix can be phrased in: PyTorch Lightning's
``Trainer``, the Hugging Face ``Trainer``."""

FrameworkFix = Callable[[Any], str]
"""Builds a framework's fix from the finding (its evidence: the measured worker count)."""


def more_severe(a: Severity, b: Severity) -> Severity:
    """The more severe of two severities."""
    return a if SEVERITIES.index(a) <= SEVERITIES.index(b) else b


@dataclass(frozen=True)
class SeverityPolicy:
    """How a finding's share of the step maps to a severity.

    ``grade(share)`` is critical at ``critical``, warning at ``warn``, info below, raised to at
    least ``floor``; ``fixed`` overrides all of it. ``risk`` marks findings about a risk rather
    than time (memory pressure, wrong numerics): they keep their severity at any saving.
    """

    warn: float = th.WARNING_SHARE
    critical: float = th.CRITICAL_SHARE
    floor: Severity = "info"
    fixed: Severity | None = None
    risk: bool = False

    def floored(self, severity: Severity, share: float) -> Severity:
        """``severity``, demoted to info when the saving is under the noise floor (1% of the
        step): never a warning for noise. Risk findings keep theirs."""
        if self.risk or share >= th.NOISE_FLOOR or severity == "info":
            return severity
        return "info"

    def grade(self, share: float) -> Severity:
        """The severity for a saving of ``share`` (fraction of the step)."""
        if self.fixed is not None:
            return self.fixed
        level: Severity = (
            "critical" if share >= self.critical else "warning" if share >= self.warn else "info"
        )
        return more_severe(level, self.floor)


class Gate(NamedTuple):
    """A second minimum a measurement must reach, beside the spec's threshold (a sync stall
    must also last 50 µs per step; fp32 GEMMs must also be a fifth of the device's time)."""

    key: str
    """The name of the measured number in :attr:`Measured.gates`."""
    minimum: Threshold


class Variant(NamedTuple):
    """Another wording of one finding, for a case the rule tells apart (FSDP's gradient
    reduction, CPU collectives): same id, same threshold, its own title and, where they
    differ, explanation and fix builder."""

    title: str
    explanation: str | None = None
    fix: FixBuilder | None = None


Same = Callable[[Any, Any, dict[str, Any]], bool]
"""Whether two findings are one cause: called with (the finding kept, the finding folded into
it, the run's record) (``rules/same_cause.py``)."""


class SameCause(NamedTuple):
    """A finding of another id that absorbs this one where one cause fired both at one site
    (``gc.collect()`` in the loop is both ``housekeeping-in-step`` and ``gc-in-step``)."""

    kept: str
    """The id of the finding kept: it names the line or the setting to change."""
    same: Same
    disjoint: bool = False
    """The two savings timed disjoint parts of the step (their sum is kept, not the larger)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class FindingSpec:
    """One registry entry: everything about a finding except the rule that measures it.

    Only what differs from the common case is declared: the severity policy defaults to the
    usual shares, no threshold means any occurrence fires, and the analyses that produce it
    are those of the rules that measure it (``registry.sources``).
    """

    id: str
    """Stable identifier; tools (tune, CI gates, dashboards) key on it, so never rename one."""
    label: str
    """Short name for the verdict line ("Fix first: <label>")."""
    title: str
    """Title template, filled with ``str.format`` from the numbers the rule measured."""
    fix: FixBuilder
    """Returns the code to paste; called with the typed inputs the rule documents."""
    explanation: str
    """Why this costs time, in a sentence or two."""
    doc_url: str
    severity: SeverityPolicy = SeverityPolicy()
    threshold: Threshold | None = None
    """The threshold that fires the finding (with its reason); None when any occurrence does."""
    sources: tuple[Source, ...] = ()
    """Analyses that produce it beside its family rules' (host-bound's run rule, written by
    hand in ``rules/run_rules.py``); ``registry.sources`` adds those of its rules."""
    knobs: tuple[str, ...] = ()
    """``torchdoctor tune`` knobs this finding points at, most relevant first."""
    aliases: tuple[str, ...] = ()
    """Ids of other findings that describe the same problem; ``check`` keeps one, this one."""
    codemods: tuple[str, ...] = ()
    """Ids of the ``torchdoctor fix`` codemods that rewrite the user's code for this finding
    (``fix/registry.py``), in the order they are tried; empty when the remedy is not code."""
    gates: tuple[Gate, ...] = ()
    """Further minimums the measurement must reach for the finding to fire."""
    variants: tuple[tuple[str, Variant], ...] = ()
    """Named wordings a rule may pick (``Measured.variant``)."""
    probe: ProbeScaling = "host"
    """How the probe effect brings its saving to the clean step (:data:`ProbeScaling`)."""
    frameworks: tuple[tuple[Framework, FrameworkFix], ...] = ()
    """The fix in a framework's own settings, by framework: under Lightning or the Hugging Face
    ``Trainer`` the loop's lines live elsewhere (``rules/framework_advice.py`` swaps it in)."""
    caveat: bool = False
    """Without a saving, this finding only qualifies the others (the numbers were taken on a
    busy machine): ``check`` keeps it when nothing else saves time, never a clean bill on a
    starved run, and drops it beside a finding that does."""
    replaces: tuple[str, ...] = ()
    """Ids of the generic trace findings this one refines: when it fires, ``analyze`` drops
    them (a blocking copy per decode step is not also ``synchronous-copies``)."""
    same_cause: tuple[SameCause, ...] = ()
    """Findings that absorb this one where one cause fired both at one site, tried in this
    order (``check`` folds it into the first that matches; ``rules/same_cause.py``)."""

    def variant(self, name: str | None) -> Variant | None:
        """The named variant; None for the spec's own wording (a KeyError for an unknown name)."""
        if name is None:
            return None
        for key, v in self.variants:
            if key == name:
                return v
        raise KeyError(f"{self.id}: no variant {name!r}")

    def format_title(self, **values: Any) -> str:
        """The title with the measured values filled in."""
        return self.title.format(**values)

    def wording(self, m: "Measured") -> tuple[str, str, str]:
        """(title, fix, explanation) of the finding ``m`` makes: its variant's where it names
        one (the spec's where the variant has none of its own), filled with what it measured."""
        v = self.variant(m.variant)
        title = (v.title if v is not None else self.title).format(**m.title)
        fix = (v.fix if v is not None and v.fix is not None else self.fix)(**m.fix)
        text = v.explanation if v is not None and v.explanation is not None else self.explanation
        return title, fix, text if m.explain is None else text.format(**m.explain)


def static(text: str) -> FixBuilder:
    """A fix builder that ignores its inputs (the fix does not depend on the user's code)."""

    def build(*_: Any, **__: Any) -> str:
        return text

    return build


class Once(NamedTuple):
    """A cost paid once per job or per epoch, not every step (``rules/one_off.py``): the
    finding keeps it in its own unit and ranks by it spread over the steps it is paid for."""

    cost_ms: float
    per: Literal["job", "epoch"] = "job"
    epoch_steps: int | None = None
    """The batches of an epoch, for a cost paid per epoch."""
    saved_ms: float | None = None
    """What the fix saves each time it is paid (None: the whole cost)."""
    break_even_steps: float | None = None


class Details(NamedTuple):
    """The costly part of a measurement (see :attr:`Measured.details`)."""

    title: Mapping[str, Any] = MappingProxyType({})
    evidence: Mapping[str, Any] = MappingProxyType({})
    where: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Measured:
    """What a family rule measured on one trace; the registry entry turns it into a finding.

    The rule only measures. Its :class:`FindingSpec` decides: the finding fires when ``value``
    reaches ``spec.threshold`` (any value fires when the spec has none), the title is
    ``spec.title`` filled with ``title``, the severity is ``spec.severity`` graded on ``share``,
    and the fix is ``spec.fix(**fix)``.
    """

    value: float
    """The number compared with the spec's threshold (a share of the step, bytes, a count)."""
    saving_ms: float = 0.0
    """What fixing it saves per step (clamped to the step when the finding is built); 0 for a
    risk, or a saving not measured."""
    share: float | None = None
    """The share of the step graded by the spec's severity policy; None: the saving's share of
    the step, as the finding states it (a run rule's is always that)."""
    title: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: dict[str, Any] = field(default_factory=dict)
    where: tuple[str, ...] = ()
    details: Callable[[], Details] | None = None
    """Evidence that costs time to gather, computed only for a finding that fires."""
    most: Severity | None = None
    """The highest severity this measurement may get, whatever its share (``"info"`` when, say,
    one step cannot show a pattern that repeats every step); None: the policy alone decides."""
    gates: dict[str, float] = field(default_factory=dict)
    """The numbers the spec's :attr:`FindingSpec.gates` are compared with."""
    variant: str | None = None
    """Which of the spec's wordings to use; None: its own."""
    judged: str | None = None
    """Another stage's judgement that fires the finding whatever ``value`` is, by name (the
    allocator judged fragmented by ``memory/fragmentation.py``)."""
    least: Severity | None = None
    """The lowest severity this measurement gets, whatever its share (allocator retries make
    fragmentation a warning); None: the policy alone decides."""
    explain: dict[str, Any] | None = None
    """Values for the explanation's template fields (what filled the memory); None: the
    explanation is a fixed text."""
    once: Once | None = None
    """A cost of the job or of an epoch: ``saving_ms`` is ignored, the finding ranks by this
    cost spread over the steps it is paid for."""

    def severity(self, policy: SeverityPolicy, step_share: float | None = None) -> Severity:
        """``policy``'s grade of ``share`` (of ``step_share``, the saving's share of the step,
        when it has none), capped at :attr:`most`, raised to :attr:`least`."""
        share = self.share if self.share is not None else step_share
        if share is None:
            raise ValueError("a measurement without a share is graded on the saving's share")
        level = policy.grade(share)
        if self.most is not None and SEVERITIES.index(level) < SEVERITIES.index(self.most):
            level = self.most
        if self.least is not None and SEVERITIES.index(level) > SEVERITIES.index(self.least):
            level = self.least
        return level

    def complete(self) -> "Measured":
        """This measurement with its ``details`` merged in (title values, evidence, where)."""
        if self.details is None:
            return self
        d = self.details()
        return replace(
            self,
            title={**self.title, **d.title},
            evidence={**self.evidence, **d.evidence},
            where=d.where or self.where,
            details=None,
        )


@dataclass(frozen=True)
class FamilyRule:
    """A registry entry and the function that measures it, side by side in one family module
    under ``rules/families/`` (see docs/architecture.md). :class:`TraceRule` measures a trace,
    :class:`RunRule` a check run's record; the spec judges both the same way. A kind that adds
    no field is a plain subclass (no dataclass of its own to build at import)."""

    spec: FindingSpec
    measure: Callable[[Any], Measured | tuple[Measured, ...] | None]
    """Called with what the rule measures; None when there is nothing to measure. A run rule
    may return several measurements, a finding each (one per DataLoader warning, one per
    memory column that grows)."""
    below: bool = False
    """The finding fires when ``value`` falls below the threshold (a utilisation), not when it
    reaches it."""
    on_capture: bool = False
    """A trace rule also measured on a trace of CUDA-graph capture, whose launches were recorded,
    not run; no other rule is (no host-bound or idle verdict applies to start-up). Only
    ``analyze`` reads it (the other kinds keep the default)."""

    def measurements(self, subject: Any) -> tuple[Measured, ...]:
        """What ``measure`` returned for ``subject``, as a tuple (empty for None)."""
        m = self.measure(subject)
        return () if m is None else m if isinstance(m, tuple) else (m,)

    def fires(self, m: Measured) -> bool:
        """The spec decides (the rule never re-checks a constant of its own): its threshold,
        then its gates; or another stage's judgement (:attr:`Measured.judged`)."""
        if m.judged is not None:
            return True
        t = self.spec.threshold
        if t is not None and not (m.value < t if self.below else m.value >= t):
            return False
        return all(m.gates.get(g.key, 0.0) >= g.minimum for g in self.spec.gates)


class TraceRule(FamilyRule):
    """A family rule measured on one trace: ``measure`` is called with the trace's
    ``TraceAnalysis`` (``analyze``; ``rules/trace_rules.py`` builds the finding); ``on_capture``
    marks the rules also measured on a graph-capture trace."""

    measure: Callable[[Any], Measured | None]
    """Called with the trace's ``TraceAnalysis``; one measurement or None."""


class RunRule(FamilyRule):
    """A family rule measured on one rank's check run: ``measure`` is called with its
    ``RunRecord`` (``check``; ``rules/run_common.py`` builds the finding, its saving capped
    at the run's mean step and graded on that share)."""


class RanksRule(FamilyRule):
    """A family rule measured across a folder of ranks: ``measure`` is called with their
    comparison (``analysis/cross_rank.CrossRank``; ``analyze`` on a folder,
    ``rules/rank_rules.py`` builds the finding, its step the slowest rank's mean step)."""

    measure: Callable[[Any], Measured | None]
    """Called with the ranks' ``CrossRank``; one measurement or None."""


class AccountRule(FamilyRule):
    """A family rule measured on the step's account: ``measure`` is called with the account of
    one rank's record after the findings merged over every rank (``rules/account_rules.py``)
    and the run's mean step; ``check`` builds the finding as a run finding's."""

    measure: Callable[[Any], Measured | None]
    """Called with ``(StepAccount or None, mean step ms or None)``; one measurement or None."""
