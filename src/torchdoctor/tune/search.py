"""The search: diagnosis first, one knob at a time, then combine the winners and refine.

Pure: it never starts a process or touches a file. It asks a ``run(trial) -> TrialResult`` callable
for measurements, so tests drive it with a fake runner and ``--resume`` replays it over stored
results (the plan depends only on results, so replaying the same results asks for the same trials).

1. baseline: fp32 eager, default optimizer, data in the main process. Its process reports what the
   device supports (pruning the knobs) and its losses are the fidelity reference.
Every comparison is interleaved: a trial trains the candidate beside the configuration it is
compared with (and the baseline), one window each per round in shuffled order, in one process
(``rounds.py``). A candidate *wins* when the whole interval of its per-round speed-up over the
incumbent clears ``1 + min_gain`` (``ab.compare``); load on the machine hits both arms of a
round alike, so drift between trials no longer reads as a speed-up.

2. single: in diagnosis order, each other value of each knob against the baseline. A knob's winner
   is its value with the highest speed-up among those that win and pass the fidelity gate.
3. combine: starting from the best single winner, add the others (best first), then the knobs
   whose best value was faster than the baseline but not decisively; keep each only if the
   combination wins against the current best, measured side by side.
4. refine: around the combined best, the knobs that became applicable (worker settings once there
   are workers), the other values of the knobs that changed, and those other values with each
   sub-knob on (more workers may pay only when they are persistent).
5. final: a confirmation trial of the pick against the baseline, in a fresh process. The claim is
   the pick's speed-up over the baseline from the search (its row, the headline and the TOML
   comment quote the same interval); when the confirmation does not clear ``min_gain``, or lies
   wholly below the claim's interval, the report says so and keeps the baseline.

An out-of-memory trial is retried with half the micro-batch and twice the gradient accumulation
(the global batch stays), up to 8 micro-batches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torchdoctor import ab
from torchdoctor.stats import RatioInterval, Spread, describe
from torchdoctor.tune import fidelity, measure
from torchdoctor.tune.options import TuneOptions
from torchdoctor.tune.space import (
    BASELINE,
    Assignment,
    Knob,
    Probe,
    Space,
    assignment_key,
    build_space,
    knob_order,
)
from torchdoctor.tune.trial import Phase, Trial, TrialResult

Runner = Callable[[Trial], TrialResult]
MAX_ACCUMULATION = 8


class BaselineFailed(Exception):
    """The baseline configuration itself does not run: nothing to tune against."""


@dataclass
class Record:
    """A finished trial with what the search made of it."""

    seq: int
    trial: Trial
    result: TrialResult
    stats: Spread | None
    """Median, IQR and count over rounds of each window's mean step time (seconds)."""
    verdict: fidelity.Fidelity | None
    comparison: ab.Comparison | None = None
    """The candidate against the configuration it was measured beside (incumbent or baseline)."""
    vs_baseline: RatioInterval | None = None
    """Per-round speed-up over the baseline arm of the same trial (None for the baseline)."""

    @property
    def usable(self) -> bool:
        """Ran, produced step times, and passed the fidelity gate."""
        ok = self.result.status == "ok" and self.stats is not None
        return ok and self.verdict is not None and self.verdict.ok

    @property
    def wins(self) -> bool:
        """Usable, and its whole interval over what it was compared with clears ``min_gain``."""
        return self.usable and self.comparison is not None and self.comparison.decision == "win"

    @property
    def speedup(self) -> float:
        """Point estimate of the speed-up over the baseline (1.0 for the baseline itself)."""
        return self.vs_baseline.ratio if self.vs_baseline is not None else 1.0


@dataclass
class Settings:
    """What bounds and judges the search."""

    budget_s: float | None = None
    """Stop starting trials once this many seconds of trial wall time are spent (None: no limit)."""
    max_trials: int | None = None
    """Run at most this many trials, the confirmation included (None: no limit)."""
    min_gain: float = ab.MIN_GAIN
    """A knob wins only when its whole speed-up interval clears ``1 + min_gain``."""
    fidelity_steps: int = TuneOptions.fidelity_steps
    """Optimizer steps compared with the reference."""
    knobs: tuple[str, ...] | None = None
    """Restrict the search to these knobs (None: every knob that applies)."""


@dataclass
class Summary:
    """Everything the search learned, for the report and the JSON export."""

    records: list[Record]
    baseline: Record
    best: Record
    space: Space
    order: list[str]
    finding_ids: list[str]
    confirmation: Record | None = None
    """The pick measured again against the baseline, in a fresh process (None: the pick was the
    baseline)."""
    confirmed: bool = True
    """The confirmation cleared ``min_gain`` and did not fall below the claim's interval (always
    True when the pick is the baseline)."""
    stopped_by: str = "done"
    """done, budget or max-trials."""
    grid_size: int = 0
    candidate: Record | None = None
    """The search's pick before the confirmation (``best`` when confirmed)."""
    min_gain: float = ab.MIN_GAIN
    """The gain a win had to clear."""

    @property
    def claim(self) -> RatioInterval | None:
        """The one speed-up claim: the pick's interval over the baseline from the search."""
        return self.best.vs_baseline if self.best is not self.baseline else None

    @property
    def drift(self) -> float | None:
        """Relative change of the baseline's median step between the first and last trial."""
        conf, base = self.confirmation, self.baseline.stats
        again = conf.result.rounds_s.get("baseline") if conf is not None else None
        if not again or base is None:
            return None
        return measure.drift(base, describe(again))


class _Stop(Exception):
    def __init__(self, why: str) -> None:
        self.why = why


def _key(assignment: Assignment, repeat: int, reference: Assignment | None) -> str:
    key = assignment_key(assignment, repeat)
    return key if reference is None else f"{key} vs {assignment_key(reference)}"


class Search:
    """One tuning search over a workload, driven by ``run``."""

    def __init__(
        self,
        run: Runner,
        settings: Settings,
        *,
        diagnose: Callable[[TrialResult], list[str]] = lambda result: [],
        on_record: Callable[[Record], None] | None = None,
    ) -> None:
        self._run = run
        self.settings = settings
        self._diagnose = diagnose
        self._on_record = on_record or (lambda record: None)
        self.records: list[Record] = []
        self._by_key: dict[str, Record] = {}
        self._reference: list[float] = []
        self._batch_size: int | None = None
        self.spent_s = 0.0
        self.space: Space | None = None
        self._promising: dict[str, Record] = {}

    # -- measuring -----------------------------------------------------------------------------
    def _room(self) -> str | None:
        s = self.settings
        # One trial stays reserved for the confirmation.
        if s.max_trials is not None and len(self.records) >= s.max_trials - 1:
            return "max-trials"
        if s.budget_s is not None and self.spent_s >= s.budget_s:
            return "budget"
        return None

    def _judge(self, result: TrialResult, precision: str) -> Record:
        """A record without seq and trial yet: stats, fidelity verdict and comparisons."""
        rec = Record(-1, Trial("", "single", {}), result, None, None)
        if result.status != "ok" or not result.step_times_s:
            return rec
        rec.stats = describe(result.step_times_s)
        rec.verdict = fidelity.check(
            self._reference or result.losses,
            result.losses,
            precision,
            steps=self.settings.fidelity_steps,
        )
        rounds, cand = result.rounds_s, result.step_times_s
        ref = rounds.get("incumbent") or rounds.get("baseline")
        if ref:
            rec.comparison = ab.compare(ref, cand, self.settings.min_gain)
        if rounds.get("baseline"):
            rec.vs_baseline = ab.interval(rounds["baseline"], cand)
        return rec

    def _once(
        self,
        assignment: Assignment,
        phase: Phase,
        repeat: int,
        reference: Assignment | None,
        *,
        reserved: bool,
    ) -> Record:
        reference = None if reference == BASELINE else reference
        key = _key(assignment, repeat, reference)
        if key in self._by_key:
            return self._by_key[key]
        why = None if reserved else self._room()
        if why is not None:
            raise _Stop(why)
        trial = Trial(key, phase, dict(assignment), repeat, reference)
        result = self._run(trial)
        self.spent_s += result.wall_s
        if result.probe and self._batch_size is None:
            self._batch_size = result.probe.get("batch_size")
        record = self._judge(result, str(assignment["precision"]))
        record.seq, record.trial = len(self.records), trial
        self.records.append(record)
        self._by_key[key] = record
        self._on_record(record)
        return record

    def _shrunk(self, assignment: Assignment) -> Assignment | None:
        accum = int(assignment["grad_accumulation"]) * 2
        if accum > MAX_ACCUMULATION:
            return None
        if self._batch_size is not None and self._batch_size % accum != 0:
            return None
        return {**assignment, "grad_accumulation": accum}

    def measure(
        self,
        assignment: Assignment,
        phase: Phase,
        repeat: int = 0,
        *,
        reference: Assignment | None = None,
        reserved: bool = False,
    ) -> Record:
        """Measure ``assignment`` beside ``reference`` (None: the baseline) and the baseline, or
        return the earlier record; after out-of-memory, retry with a smaller micro-batch."""
        record = self._once(assignment, phase, repeat, reference, reserved=reserved)
        while record.result.status == "oom":
            smaller = self._shrunk(record.trial.assignment)
            if smaller is None:
                break
            record = self._once(smaller, "retry", repeat, reference, reserved=reserved)
        return record

    # -- phases --------------------------------------------------------------------------------
    def _normalize(self, assignment: Assignment) -> Assignment:
        assert self.space is not None
        return self.space.normalize(assignment)

    def _singles(self, base: Record, order: list[str], winners: dict[str, Record]) -> None:
        assert self.space is not None
        for name in order:
            knob = self.space.knob(name)
            assert knob is not None
            measured = [
                self.measure(self._normalize({**base.trial.assignment, name: value}), "single")
                for value in knob.values[1:]
            ]
            beat = [r for r in measured if r.wins]
            if beat:
                winners[name] = max(beat, key=lambda r: r.speedup)
                continue
            # Faster than the baseline but not decisively: worth one trial in combination
            # (compile's gain can show only once the optimizer step is no longer the bottleneck).
            faster = [r for r in measured if r.usable and r.speedup > 1.0]
            if faster:
                self._promising[name] = max(faster, key=lambda r: r.speedup)

    def _try(self, current: Record, assignment: Assignment, phase: Phase) -> Record:
        """``assignment`` measured beside ``current``: the new current when it wins.

        Not measured when an earlier trial of it failed, was rejected, or was clearly slower than
        ``current`` (both speed-ups are per-round ratios over a baseline arm, so they compare
        across trials; its whole interval lies below ``current``'s).
        """
        assignment = self._normalize(assignment)
        if self._hopeless(assignment, current):
            return current
        got = self.measure(assignment, phase, reference=current.trial.assignment)
        return got if got.wins else current

    def _hopeless(self, assignment: Assignment, current: Record) -> bool:
        ours = current.vs_baseline
        for rec in self.records:
            if rec.trial.assignment != assignment or rec.result.status == "oom":
                continue
            if not rec.usable:
                return True
            theirs = rec.vs_baseline
            if theirs is not None and ours is not None and theirs.below(ours.low):
                return True
        return False

    def _combine(self, base: Record, winners: dict[str, Record]) -> Record:
        ranked = sorted(winners.items(), key=lambda kv: -kv[1].speedup)
        extra = sorted(self._promising.items(), key=lambda kv: -kv[1].speedup)
        if not ranked:
            return base
        current = ranked[0][1]
        for name, rec in ranked[1:] + extra:
            value = rec.trial.assignment[name]
            current = self._try(current, {**current.trial.assignment, name: value}, "combine")
        return current

    def _refine(self, base: Record, current: Record) -> Record:
        assert self.space is not None
        a0 = base.trial.assignment
        changed = [
            k for k in self.space.top_level() if current.trial.assignment[k.name] != a0[k.name]
        ]
        names = {k.name for k in changed}
        tries = [k for k in self.space.knobs if k.parent in names] + changed
        for knob in tries:
            for value in knob.values:
                if value in (current.trial.assignment[knob.name], a0[knob.name]):
                    continue
                current = self._try(
                    current, {**current.trial.assignment, knob.name: value}, "refine"
                )
        return self._refine_parents(base, current, changed)

    def _refine_parents(self, base: Record, current: Record, changed: list[Knob]) -> Record:
        # A knob's other values with its sub-knobs on: more workers may pay only when persistent.
        assert self.space is not None
        a0 = base.trial.assignment
        for parent in changed:
            subs = [k for k in self.space.knobs if k.parent == parent.name]
            for value in parent.values:
                if value in (current.trial.assignment[parent.name], a0[parent.name]):
                    continue
                for sub in subs:
                    for sv in sub.values[1:]:
                        assignment = {**current.trial.assignment, parent.name: value, sub.name: sv}
                        current = self._try(current, assignment, "refine")
        return current

    def run(self) -> Summary:
        """Run the whole search; raises :class:`BaselineFailed` when the baseline cannot run."""
        base = self.measure(dict(BASELINE), "baseline", reserved=True)
        if not base.usable:
            raise BaselineFailed(
                f"the baseline configuration failed ({base.result.status}): {base.result.reason}"
            )
        self._reference = list(base.result.losses)
        self.space = build_space(Probe.from_dict(base.result.probe or {}), self.settings.knobs)
        finding_ids = list(self._diagnose(base.result))
        order = knob_order(self.space, finding_ids)
        winners: dict[str, Record] = {}
        best, stopped_by = base, "done"
        try:
            self._singles(base, order, winners)
            best = self._combine(base, winners)
            best = self._refine(base, best)
        except _Stop as stop:
            stopped_by = stop.why
            best = self._best_so_far(base)
        confirmation, confirmed = None, True
        if best is not base:
            confirmation = self.measure(best.trial.assignment, "final", repeat=1, reserved=True)
            confirmed = self._confirmed(best, confirmation)
        return Summary(
            records=self.records,
            baseline=base,
            best=best if confirmed else base,
            candidate=best,
            space=self.space,
            order=order,
            finding_ids=finding_ids,
            confirmation=confirmation,
            confirmed=confirmed,
            stopped_by=stopped_by,
            grid_size=len(self.space.grid()),
            min_gain=self.settings.min_gain,
        )

    def _confirmed(self, best: Record, again: Record) -> bool:
        """The confirmation clears ``min_gain`` and does not lie wholly below the claim."""
        claim, conf = best.vs_baseline, again.comparison
        if not again.usable or conf is None or not conf.interval.clears(1 + self.settings.min_gain):
            return False
        return claim is None or not conf.interval.below(claim.low)

    def _best_so_far(self, base: Record) -> Record:
        """When stopped early: the winner with the highest speed-up over the baseline."""
        gain = 1.0 + self.settings.min_gain
        done = [
            r
            for r in self.records
            if r.wins and r.trial.repeat == 0 and r.vs_baseline and r.vs_baseline.clears(gain)
        ]
        return max(done, key=lambda r: r.speedup, default=base)
