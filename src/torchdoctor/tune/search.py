"""The search: diagnosis first, one knob at a time, then combine the winners and refine.

Pure: it never starts a process or touches a file. It asks a ``run(trial) -> TrialResult`` callable
for measurements, so tests drive it with a fake runner and ``--resume`` replays it over stored
results (the plan depends only on results, so replaying the same results asks for the same trials).

1. baseline: fp32 eager, default optimizer, data in the main process. Its process reports what the
   device supports (pruning the knobs) and its losses are the fidelity reference.
2. single: in diagnosis order, each other value of each knob on top of the baseline. A knob's winner
   is its fastest value that beats the baseline by more than the noise and passes the fidelity gate.
3. combine: starting from the fastest single winner, add the others (fastest first), then the
   knobs whose best value was faster than the baseline but inside the noise; keep each only if the
   combination beats the current best by more than the noise.
4. refine: around the combined best, the knobs that became applicable (worker settings once there
   are workers), the other values of the knobs that changed, and those other values with each
   sub-knob on (more workers may pay only when they are persistent).
5. final: the baseline again (to measure drift over the search) and the best again. Background
   load only ever adds time, so each of the two is judged by the lower of its two medians, and the
   best is kept only if that still beats the baseline by more than the noise.

An out-of-memory trial is retried with half the micro-batch and twice the gradient accumulation
(the global batch stays), up to 8 micro-batches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torchdoctor.tune import fidelity, measure
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
    stats: measure.StepStats | None
    verdict: fidelity.Verdict | None

    @property
    def usable(self) -> bool:
        """Ran, produced step times, and passed the fidelity gate."""
        ok = self.result.status == "ok" and self.stats is not None
        return ok and self.verdict is not None and self.verdict.ok


@dataclass
class Settings:
    """What bounds and judges the search."""

    budget_s: float | None = None
    """Stop starting trials once this many seconds of trial wall time are spent (None: no limit)."""
    max_trials: int | None = None
    """Run at most this many trials, the final baseline included (None: no limit)."""
    min_gain: float = measure.MIN_GAIN
    """Smallest relative speed-up that counts (see ``measure.noise_threshold_s``)."""
    fidelity_steps: int = 20
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
    baseline_again: Record | None = None
    best_again: Record | None = None
    confirmed: bool = True
    """The best still beat the baseline when both were measured again (always True for the
    baseline itself)."""
    stopped_by: str = "done"
    """done, budget or max-trials."""
    grid_size: int = 0
    winners: dict[str, Record] = field(default_factory=dict)
    candidate: Record | None = None
    """The search's pick before the final re-measurement (``best`` when confirmed)."""

    @property
    def drift(self) -> float | None:
        """Relative change of the baseline's median between the first and last trial."""
        a = self.baseline_again
        if a is None or a.stats is None or self.baseline.stats is None:
            return None
        return measure.drift(self.baseline.stats, a.stats)


def least_disturbed(*records: Record | None) -> measure.StepStats | None:
    """Of several measurements of one configuration, the stats with the lowest median.

    Load from other processes only ever adds time, so the fastest repeat is the least disturbed.
    """
    stats = [r.stats for r in records if r is not None and r.usable and r.stats is not None]
    return min(stats, key=lambda st: st.median_s) if stats else None


class _Stop(Exception):
    def __init__(self, why: str) -> None:
        self.why = why


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
        # Two trials stay reserved for the final phase (the baseline and the best again).
        if s.max_trials is not None and len(self.records) >= s.max_trials - 2:
            return "max-trials"
        if s.budget_s is not None and self.spent_s >= s.budget_s:
            return "budget"
        return None

    def _judge(
        self, result: TrialResult, precision: str
    ) -> tuple[measure.StepStats | None, fidelity.Verdict | None]:
        if result.status != "ok" or not result.step_times_s:
            return None, None
        stats = measure.step_stats(result.step_times_s, period=result.steps_per_epoch)
        verdict = fidelity.check(
            self._reference or result.losses,
            result.losses,
            precision,
            steps=self.settings.fidelity_steps,
        )
        return stats, verdict

    def _once(self, assignment: Assignment, phase: Phase, repeat: int, *, reserved: bool) -> Record:
        key = assignment_key(assignment, repeat)
        if key in self._by_key:
            return self._by_key[key]
        why = None if reserved else self._room()
        if why is not None:
            raise _Stop(why)
        trial = Trial(key, phase, dict(assignment), repeat)
        result = self._run(trial)
        self.spent_s += result.wall_s
        if result.probe and self._batch_size is None:
            self._batch_size = result.probe.get("batch_size")
        stats, verdict = self._judge(result, str(assignment["precision"]))
        record = Record(len(self.records), trial, result, stats, verdict)
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
        self, assignment: Assignment, phase: Phase, repeat: int = 0, *, reserved: bool = False
    ) -> Record:
        """Measure ``assignment`` (or return its earlier record); after out-of-memory, retry smaller."""
        record = self._once(assignment, phase, repeat, reserved=reserved)
        while record.result.status == "oom":
            smaller = self._shrunk(record.trial.assignment)
            if smaller is None:
                break
            record = self._once(smaller, "retry", repeat, reserved=reserved)
        return record

    # -- phases --------------------------------------------------------------------------------
    def _normalize(self, assignment: Assignment) -> Assignment:
        assert self.space is not None
        return self.space.normalize(assignment)

    def _better(self, cand: Record, than: Record) -> bool:
        assert cand.stats is not None or not cand.usable
        return (
            cand.usable
            and than.stats is not None
            and cand.stats is not None
            and measure.beats(cand.stats, than.stats, min_gain=self.settings.min_gain)
        )

    def _singles(self, base: Record, order: list[str], winners: dict[str, Record]) -> None:
        assert self.space is not None
        for name in order:
            knob = self.space.knob(name)
            assert knob is not None
            beat = []
            for value in knob.values[1:]:
                rec = self.measure(
                    self._normalize({**base.trial.assignment, name: value}), "single"
                )
                if self._better(rec, base):
                    beat.append(rec)
            # Among the values that beat the baseline, the lowest median is the best estimate.
            if beat:
                winners[name] = min(beat, key=lambda r: r.stats.median_s if r.stats else 0.0)
            else:
                self._note_promising(base, name)

    def _note_promising(self, base: Record, name: str) -> None:
        # Faster than the baseline but inside the noise alone: worth one trial in combination
        # (compile's gain can show only once the optimizer step is no longer the bottleneck).
        assert self.space is not None and base.stats is not None
        knob = self.space.knob(name)
        assert knob is not None
        faster = [
            r
            for v in knob.values[1:]
            if (
                r := self._by_key.get(
                    assignment_key(self._normalize({**base.trial.assignment, name: v}))
                )
            )
            and r.usable
            and r.stats is not None
            and r.stats.median_s < base.stats.median_s
        ]
        if faster:
            self._promising[name] = min(faster, key=lambda r: r.stats.median_s if r.stats else 0.0)

    def _combine(self, base: Record, winners: dict[str, Record]) -> Record:
        ranked = sorted(
            winners.items(), key=lambda kv: kv[1].stats.median_s if kv[1].stats else 0.0
        )
        extra = sorted(
            self._promising.items(), key=lambda kv: kv[1].stats.median_s if kv[1].stats else 0.0
        )
        if not ranked:
            return base
        current = ranked[0][1]
        for name, rec in ranked[1:] + extra:
            cand = self._normalize({**current.trial.assignment, name: rec.trial.assignment[name]})
            got = self.measure(cand, "combine")
            if self._better(got, current):
                current = got
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
                cand = self._normalize({**current.trial.assignment, knob.name: value})
                got = self.measure(cand, "refine")
                if self._better(got, current):
                    current = got
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
                        got = self.measure(self._normalize(assignment), "refine")
                        if self._better(got, current):
                            current = got
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
        again = self.measure(base.trial.assignment, "final", repeat=1, reserved=True)
        best_again, confirmed = None, True
        if best is not base:
            best_again = self.measure(best.trial.assignment, "final", repeat=1, reserved=True)
            confirmed = self._confirmed(base, again, best, best_again)
        return Summary(
            records=self.records,
            baseline=base,
            best=best if confirmed else base,
            candidate=best,
            space=self.space,
            order=order,
            finding_ids=finding_ids,
            baseline_again=again,
            best_again=best_again,
            confirmed=confirmed,
            stopped_by=stopped_by,
            grid_size=len(self.space.grid()),
            winners=winners,
        )

    def _confirmed(self, base: Record, base2: Record, best: Record, best2: Record) -> bool:
        a = least_disturbed(best, best2)
        b = least_disturbed(base, base2)
        ok = a is not None and b is not None
        return ok and measure.beats(a, b, min_gain=self.settings.min_gain)  # type: ignore[arg-type]

    def _best_so_far(self, base: Record) -> Record:
        best = base
        for rec in self.records:
            if rec.trial.repeat == 0 and self._better(rec, best):
                best = rec
        return best
