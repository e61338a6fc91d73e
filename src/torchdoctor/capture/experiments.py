"""Measure what a mode costs by switching it for a few extra steps inside the run.

After the profiled window, when ``check`` is about to stop the script anyway (never with
``--full``, never under torchrun, where ranks must stop on the same step), each ``Toggle``
runs for a few more steps, interleaved with the user's own setting, one step each:
``changed, baseline, baseline, changed, changed, baseline, baseline, changed`` (four pairs) after
one discarded warm-up step in
the changed setting (the first step after a switch pays for it: a thread pool grows, caches
refill). The result is both medians and the per-pair ratios.

A toggle changes nothing the script can observe in its results, except where noted by its
rule (more threads reorder float sums; no grad for forwards whose outputs never reach a
backward). Everything is switched back before the script is stopped.

The extra steps are an instrument of their own, so they are planned from the measured window
(``plan``) and skipped, with the reason in the record, when they cannot be clean: steps too long
for the time limit (it scales with the step: the planned steps' time, three times over, never
more than ``MAX_BUDGET_S``), steps too uneven for four pairs to say anything, and (per toggle, in
``Accounting._toggles``) a compiled model whose guards the switch would trip. A pair whose step
waited for its batch far longer than the window's steps did (an epoch's start: workers
restarted) or whose baseline step ran far beyond a regular one (something else ran in it) is
rejected, not averaged in; a regular step is the window's median, or the toggle's own baseline
steps' where the machine slowed since the window (both arms of a pair see the same load, so a
slower machine is no reason to drop a pair). A toggle marked ``last`` (more intra-op threads:
on a machine whose cores other processes hold its changed arm can run tens of times slower)
runs after the others, so that it never uses up the time limit or the script's remaining
steps before they are measured. The run's record is written before the first extra step
(``Accounting.experiments_begin``), so no ending of the experiments loses the report.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any

from torchdoctor.capture import guest
from torchdoctor.record.account import Experiment
from torchdoctor.threshold import Threshold

PATTERN = (
    "changed",
    "baseline",
    "baseline",
    "changed",
    "changed",
    "baseline",
    "baseline",
    "changed",
)
WARM_STEPS = 1
STEPS_PER_TOGGLE = WARM_STEPS + len(PATTERN)
MAX_BUDGET_S = Threshold(
    20.0,
    "the script was told it stops: at most 20 s of extra steps, all toggles together, so a "
    "measurement never holds a run (or a CI job) much past its profiled steps",
)
BUDGET_SLACK = Threshold(
    3.0,
    "the time limit is the planned steps at the window's median step times 3: room for a "
    "slower arm (the mode being measured can cost that much, a switch's first step more) "
    "without waiting on a stuck one",
)
MIN_TOGGLE_S = Threshold(
    2.0,
    "a toggle of millisecond steps gets 2 s all the same: a switch's own cost (a thread pool "
    "growing, a hook installed) must not cut short a measurement that is cheap anyway",
)
UNEVEN_SPREAD = Threshold(
    1.0,
    "window steps whose interquartile range is as large as their median: four pairs of such "
    "steps cannot tell a mode's cost from the steps' own variation (alternating kinds of "
    "step, or a machine too busy to time anything)",
)
WAIT_OUTLIER_SHARE = Threshold(
    0.25,
    "a step that waited for its batch longer than the window's median wait plus a quarter of "
    "the median step was an epoch's start (workers restarted) or a stall, not a regular step",
)
BASELINE_OUTLIER = Threshold(
    2.0,
    "a baseline step (the user's own setting) more than twice the window's median step did "
    "something the window's steps did not (an epoch boundary, evaluation, a checkpoint)",
)
MIN_PAIRS = 2
"""Fewer clean pairs than this measure nothing: the toggle reports no ratio."""


@dataclass(frozen=True)
class Plan:
    """What the window's steps allow: the time limit of the extra steps, or why they cannot run."""

    budget_s: float = 0.0
    """Wall time allowed for every planned toggle together (0 when skipped)."""
    toggles: int = 0
    """How many toggles fit in the limit (the first ones of the list)."""
    skip: str | None = None
    """Why no extra step may run (None: they may)."""
    step_ms: float = 0.0
    """The window's median step, the reference of every limit."""
    wait_ms: float = 0.0
    """The window's median data wait per step."""


def plan(step_ms: Sequence[float], wait_ms: Sequence[float], toggles: int) -> Plan:
    """The extra steps' plan from the measured window's step and data-wait times (ms)."""
    from torchdoctor.stats import describe

    steps = [float(x) for x in step_ms if x > 0]
    if toggles <= 0:
        return Plan(skip="nothing to measure")
    if len(steps) < 2:
        return Plan(skip="too few measured steps to compare the extra steps against")
    spread = describe(steps)
    waits = [float(x) for x in wait_ms] or [0.0]
    ref, wait = spread.median, float(median(waits))
    planned_s = STEPS_PER_TOGGLE * ref / 1e3  # one toggle's steps at the window's pace
    if planned_s > MAX_BUDGET_S:
        return Plan(
            skip=f"steps of {ref / 1e3:.1f} s: the {STEPS_PER_TOGGLE} extra steps a measurement "
            f"needs would take about {STEPS_PER_TOGGLE * ref / 1e3:.0f} s (limit "
            f"{MAX_BUDGET_S:.0f} s)",
            step_ms=ref,
            wait_ms=wait,
        )
    if spread.rel_spread >= UNEVEN_SPREAD:
        return Plan(
            skip=f"the measured steps are too uneven (quartiles {spread.q1:.1f}-{spread.q3:.1f} "
            f"ms around a {ref:.1f} ms median) for {len(PATTERN) // 2} pairs to measure a "
            "mode's cost",
            step_ms=ref,
            wait_ms=wait,
        )
    fit = min(toggles, int(MAX_BUDGET_S // planned_s))
    per_toggle_s = max(MIN_TOGGLE_S, planned_s * BUDGET_SLACK)
    budget = min(float(MAX_BUDGET_S), fit * per_toggle_s)
    return Plan(budget_s=budget, toggles=fit, step_ms=ref, wait_ms=wait)


@dataclass
class Toggle:
    """One mode switch: ``apply`` sets the changed setting, ``restore`` the user's."""

    id: str
    """The finding id whose cost it measures."""
    what: str
    """What the changed arm does, for the report ("anomaly detection off")."""
    apply: Callable[[], None]
    restore: Callable[[], None]
    cleanup: Callable[[], None] | None = None
    """Called once when the experiments end (hooks the toggle installed for both arms)."""
    baseline_ms: list[float] = field(default_factory=list)
    changed_ms: list[float] = field(default_factory=list)
    baseline_wait_ms: list[float] = field(default_factory=list)
    """Each baseline step's wait for its batch (ms), in step order."""
    changed_wait_ms: list[float] = field(default_factory=list)
    baseline_core_ms: list[float] = field(default_factory=list)
    """Each baseline step's wait for a core (ms; NaN unknown): other processes held the CPUs."""
    changed_core_ms: list[float] = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None
    """Why this toggle was not measured (never switched), for the report."""
    last: bool = False
    """Run after every other toggle: its changed arm may be far slower than the script's."""

    @classmethod
    def skip(cls, id: str, what: str, reason: str) -> Toggle:
        """A toggle that is never switched, only reported with ``reason``."""
        return cls(id, what, _nothing, _nothing, skipped=reason)

    def record(self, arm: str, step_ms: float, wait_ms: float, core_ms: float = math.nan) -> None:
        """One step of ``arm`` (``changed`` or ``baseline``) ended, having waited ``wait_ms``
        for its batch and ``core_ms`` for a core."""
        if arm == "changed":
            self.changed_ms.append(step_ms)
            self.changed_wait_ms.append(wait_ms)
            self.changed_core_ms.append(core_ms)
        elif arm == "baseline":
            self.baseline_ms.append(step_ms)
            self.baseline_wait_ms.append(wait_ms)
            self.baseline_core_ms.append(core_ms)

    def result(self, ref: Plan | None = None) -> Experiment:
        """Both medians (ms) over the clean pairs, their ratio (changed / baseline), the
        per-pair ratios (and net of each step's wait for a core, where every clean pair has
        that reading), and the pairs rejected with the reason (``ref``: the window's plan, the
        reference of a regular step; None: every pair counts)."""
        pairs, rejected = self._pairs(ref)
        net = [] if self.skipped else self._net_ratios(ref)
        base_ms = [b for _, b in pairs]
        changed_ms = [c for c, _ in pairs]
        base = median(base_ms) if base_ms else None
        changed = median(changed_ms) if changed_ms else None
        ratio = (changed / base) if base and changed is not None else None
        skipped = self.skipped
        if skipped is None and self.error is None and ratio is not None and len(pairs) < MIN_PAIRS:
            skipped = f"only {len(pairs)} clean pair(s) of steps: not a measurement"
        if skipped is not None:
            base = changed = ratio = None
        return Experiment(
            id=self.id,
            toggle=self.what,
            baseline_ms=tuple(round(x, 4) for x in self.baseline_ms),
            changed_ms=tuple(round(x, 4) for x in self.changed_ms),
            baseline_median_ms=base,
            changed_median_ms=changed,
            ratio=ratio,
            pair_ratios=() if skipped else tuple(round(c / b, 4) for c, b in pairs if b > 0),
            net_pair_ratios=() if skipped else tuple(net),
            rejected_pairs=tuple(rejected),
            error=self.error,
            skipped=skipped,
        )

    def _net_ratios(self, ref: Plan | None) -> list[float]:
        """Each clean pair's ratio of the steps net of their wait for a core (the CPU time
        other processes took from them; both steps of a pair ran under the same load, but a
        step that waited 90% of its time measures the scheduler more than the mode). Empty
        where a clean pair lacks the reading or nets to nothing."""
        out = []
        for i in range(min(len(self.changed_ms), len(self.baseline_ms))):
            if ref is not None and self._irregular(i, ref) is not None:
                continue
            c = self.changed_ms[i] - _at(self.changed_core_ms, i, math.nan)
            b = self.baseline_ms[i] - _at(self.baseline_core_ms, i, math.nan)
            if not (c > 0 and b > 0):  # NaN too
                return []
            out.append(round(c / b, 4))
        return out

    def _pairs(self, ref: Plan | None) -> tuple[list[tuple[float, float]], list[str]]:
        """(changed, baseline) step pairs that are regular steps, and why the others are not."""
        n = min(len(self.changed_ms), len(self.baseline_ms))
        pairs: list[tuple[float, float]] = []
        rejected: list[str] = []
        for i in range(n):
            c, b = self.changed_ms[i], self.baseline_ms[i]
            why = None if ref is None else self._irregular(i, ref)
            if why is None:
                pairs.append((c, b))
            else:
                rejected.append(f"pair {i + 1} ({c:.1f} ms changed, {b:.1f} ms baseline): {why}")
        return pairs, rejected

    def _irregular(self, i: int, ref: Plan) -> str | None:
        limit = ref.wait_ms + WAIT_OUTLIER_SHARE * ref.step_ms
        waits = (_at(self.changed_wait_ms, i), _at(self.baseline_wait_ms, i))
        if max(waits) > limit:
            return (
                f"a step waited {max(waits):.1f} ms for its batch (the window's steps: "
                f"{ref.wait_ms:.1f} ms): an epoch's start or a stall"
            )
        regular = max(ref.step_ms, median(self.baseline_ms))
        if regular > 0 and self.baseline_ms[i] > BASELINE_OUTLIER * regular:
            return (
                f"the baseline step ran {self.baseline_ms[i] / regular:.1f}x a regular step "
                f"({regular:.1f} ms, the window's median or this toggle's baseline steps' where "
                "the machine slowed since): it did more than a regular step"
            )
        return None


def _nothing() -> None:
    return None


def _at(values: list[float], i: int, missing: float = 0.0) -> float:
    return values[i] if i < len(values) else missing


class Experiments:
    """Runs the toggles one after another, one step per tick, within the plan's time limit."""

    def __init__(
        self,
        toggles: list[Toggle],
        budget_s: float = MAX_BUDGET_S,
        ref: Plan | None = None,
        last_wait_s: Callable[[], float] | None = None,
        last_core_s: Callable[[], float] | None = None,
    ) -> None:
        self.toggles = toggles
        self.budget_s = budget_s
        self.ref = ref
        """The window's plan: the reference of a regular step (None: no pair is rejected)."""
        self.last_wait_s = last_wait_s or (lambda: 0.0)
        """The data wait (s) of the step that just ended."""
        self.last_core_s = last_core_s
        """Its wait for a core (s; NaN unknown); None: not read (NaN)."""
        self.stopped: str | None = None
        """Why the extra steps stopped before the plan's end (the time limit)."""
        self._plan: list[tuple[int, str]] = []
        for i, t in sorted(enumerate(toggles), key=lambda it: it[1].last):
            if t.skipped is None:
                self._plan += [(i, "warm")] * WARM_STEPS + [(i, arm) for arm in PATTERN]
        self._pos = -1
        self._current: tuple[int, str] | None = None
        self._t0 = 0.0
        self.done = False

    @property
    def planned(self) -> list[Toggle]:
        """The toggles that will be switched (not skipped)."""
        return [t for t in self.toggles if t.skipped is None]

    def begin(self) -> bool:
        """Set up the first step; False when there is nothing to run."""
        if not self._plan:
            self.abort()
            return False
        self._t0 = time.perf_counter()
        return self._next()

    def tick(self, step_s: float) -> bool:
        """Record the step that just ended; set up the next one. False when finished."""
        if self._current is not None:
            i, arm = self._current
            try:
                wait_ms = float(self.last_wait_s()) * 1e3
            except Exception:
                wait_ms = 0.0
            self.toggles[i].record(arm, step_s * 1e3, wait_ms, self._core_ms())
        elapsed = time.perf_counter() - self._t0
        # The next step must fit too: a run stops within the limit, not one long step past it.
        expected_s = max(step_s, (self.ref.step_ms / 1e3) if self.ref else 0.0)
        if self._pos + 1 < len(self._plan) and elapsed + expected_s > self.budget_s:
            self.stopped = (
                f"time limit: {elapsed:.1f} s of extra steps, the next would pass the "
                f"{self.budget_s:.1f} s limit"
            )
            self._cut_short()
            self.abort()
            return False
        return self._next()

    def _core_ms(self) -> float:
        """The core wait (ms) of the step that just ended (``last_core_s``); NaN unknown."""
        try:
            return float(self.last_core_s()) * 1e3 if self.last_core_s else math.nan
        except Exception:
            return math.nan

    def _cut_short(self) -> None:
        for t in self.planned:
            if t.error is None and len(t.changed_ms) + len(t.baseline_ms) < len(PATTERN):
                t.error = f"cut short by the {self.budget_s:.1f} s limit of the extra steps"

    def _next(self) -> bool:
        self._pos += 1
        previous = self._current
        if self._pos >= len(self._plan):
            self.abort()
            return False
        i, arm = self._plan[self._pos]
        toggle = self.toggles[i]
        if toggle.error is not None:  # a toggle that failed is skipped
            self._current = None
            return self._next()
        try:
            if previous is not None and previous[0] != i:
                self._switch(self.toggles[previous[0]], "baseline")
            self._switch(toggle, arm)
            self._current = (i, arm)
        except Exception as exc:
            toggle.error = f"{type(exc).__name__}: {exc}"
            guest.note(f"measuring {toggle.id}", exc)
            self._safe_restore(toggle)
            self._current = None
            return self._next()
        return True

    def _switch(self, toggle: Toggle, arm: str) -> None:
        if arm in ("changed", "warm"):
            toggle.apply()
        else:
            toggle.restore()

    def _safe_restore(self, toggle: Toggle) -> None:
        try:
            toggle.restore()
        except Exception as exc:
            guest.note(f"restoring after {toggle.id}", exc)

    def abort(self) -> None:
        """Switch everything back (idempotent)."""
        if self.done:
            return
        self.done = True
        if self._current is not None:
            self._safe_restore(self.toggles[self._current[0]])
        self._current = None
        for t in self.toggles:
            if t.cleanup is not None:
                try:
                    t.cleanup()
                except Exception as exc:
                    guest.note(f"cleaning up after {t.id}", exc)

    def results(self) -> list[Experiment]:
        """One result per toggle: measured, failed, skipped (with the reason), or, while the
        extra steps still run (the record written before them), not measured yet."""
        out = []
        for t in self.toggles:
            r = t.result(self.ref)
            if not self.done and t.skipped is None and t.error is None:
                r = replace(
                    r,
                    skipped="not measured: the run ended during its extra steps",
                    ratio=None,
                    baseline_median_ms=None,
                    changed_median_ms=None,
                )
            out.append(r)
        return out


@dataclass
class Host:
    """What the extra steps need from the run around them (``host_for`` builds it from the
    step clock)."""

    window_times: Callable[[], tuple[list[float], list[float]]]
    """The measured window's step times and data waits (ms)."""
    last_wait_s: Callable[[], float]
    """The data wait (s) of the step that just ended."""
    last_core_s: Callable[[], float]
    """Its wait for a core (s; NaN where the clock could not read it)."""
    before: Callable[[], None]
    """Called once before the first extra step: the run's record is written, and what happens
    from here on (a recompile) is marked as ours."""


def host_for(clock: Any, before: Callable[[], None]) -> Host:
    """A ``Host`` reading a ``StepClock``'s steps (its window: the measured steps)."""

    def window_times() -> tuple[list[float], list[float]]:
        # The clean window (steps timed with no instrument armed) when the schedule has one:
        # the extra steps run without instruments too. Else the profiled window.
        span = getattr(getattr(clock, "schedule", None), "clean", None) or clock.window_steps
        if span is None or len(clock.step_s) < span[1]:
            span = clock.window_steps
        if span is None:
            return [], []
        lo, hi = span[0] - 1, span[1]
        return [s * 1e3 for s in clock.step_s[lo:hi]], [s * 1e3 for s in clock.data_wait_s[lo:hi]]

    def last_wait_s() -> float:
        waits = clock.data_wait_s
        return float(waits[-1]) if len(waits) else 0.0

    def last_core_s() -> float:
        cores = getattr(clock, "core_wait_s", None)
        return float(cores[-1]) if cores is not None and len(cores) else math.nan

    return Host(window_times, last_wait_s, last_core_s, before)
