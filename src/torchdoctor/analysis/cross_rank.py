"""Cross-rank analysis on per-rank summaries: which rank holds the others back, step by step.

Definitions (also in docs/ranks.md):

* A rank's *work* in a step is its step time minus its time waiting in collectives. Fast ranks
  absorb a slow one by waiting, so the rank with the most work, not the longest step, is the one
  the others wait for.
* The *straggler of a step* is the rank with the most work in that step (steps all ranks have).
* *Collective skew*: the same collective (same step, same kind, same position within the step)
  starts on each rank when that rank arrives; the last to arrive makes the others wait
  ``last start - their start``.
* A rank has *failed* when its trace is missing or unreadable, stops before the others' last
  step, or lacks a collective that the others entered in the last step (it never arrived).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from torchdoctor.analysis.rank_summary import RankSummary

TOP_SKEWS = 10
CLOCK_NOTE_MS = 1.0
"""Clock offsets between ranks above this are reported (hosts' clocks disagree)."""
HANG_STEP_FACTOR = 3.0
"""A last step this many times the rank's median step is a stall, not noise: step times of a
steady training loop vary by tens of percent, not several-fold."""
HANG_WAIT_SHARE = 0.5
"""...and most of it spent waiting in a collective, which is what a rank does when a peer died."""


@dataclass(frozen=True)
class FailedRank:
    """A rank that did not finish with the others, and how we know."""

    rank: int
    reason: str
    path: str = ""


@dataclass(frozen=True)
class RankWork:
    """One rank's per-step means (ms) over the steps every healthy rank has."""

    rank: int
    step_ms: float
    wait_ms: float
    work_ms: float
    exposed_comm_ms: float
    straggler_steps: int
    """Steps in which this rank had the most work."""
    last_arrivals: int
    """Collectives this rank reached last."""
    caused_wait_ms: float
    """Per step: the others' summed wait in collectives this rank reached last."""
    skew_wait_ms: float = 0.0
    """Per step: this rank's wait in collectives for a rank that arrived later (rank skew)."""


@dataclass(frozen=True)
class StepStraggler:
    step: int
    rank: int
    work_ms: float
    median_work_ms: float


@dataclass(frozen=True)
class CollectiveSkew:
    """One collective across ranks: who arrived last and what it cost the others."""

    step: int
    kind: str
    index: int
    """Position among this step's collectives of this kind."""
    last_rank: int
    skew_ms: float
    """Last start minus first start."""
    others_wait_ms: float
    """Sum over the other ranks of (last start - their start)."""
    waits_ms: tuple[tuple[int, float], ...] = ()
    """(rank, last start - that rank's start) for every rank: what each waited for the last."""


@dataclass(frozen=True)
class CrossRank:
    """Everything compared across ranks (failed ranks are listed, never compared)."""

    ranks: tuple[RankWork, ...]
    common_steps: tuple[int, ...]
    stragglers: tuple[StepStraggler, ...]
    skews: tuple[CollectiveSkew, ...]
    """The largest skews, largest first."""
    matched_collectives: int
    slowest_rank: int | None
    """The healthy rank with the most work per step."""
    failed: tuple[FailedRank, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())
    """What the comparison could not do or left out (missing traces, different windows)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cross_rank(summaries: list[RankSummary], failed: list[FailedRank]) -> CrossRank:
    """Compare ranks: work per step, stragglers, collective skew; adds ranks found failed here.

    ``summaries`` have rank numbers and are sorted by rank; ``failed`` are those known already.
    """
    stalled = any(_hung(s) for s in summaries)
    failed, notes = _failures(summaries, failed)
    bad = {f.rank for f in failed}
    healthy = [s for s in summaries if s.rank not in bad and s.n_steps]
    steps = _common_steps(healthy, drop_last=stalled)
    if not healthy:
        return CrossRank((), (), (), (), 0, None, tuple(failed), tuple(notes))
    if steps:
        work = np.array([_at(s, s.work_ms, steps) for s in healthy])  # ranks x steps
    else:  # traces of different windows: compare each rank's own mean
        notes.append("the ranks' traces share no step number; compared by mean step")
        work = np.array([[float(s.work_ms.mean())] for s in healthy])
    stragglers = _stragglers(healthy, work, steps) if steps else []
    matched, offset_ms = _match_collectives(healthy, set(steps))
    if offset_ms > CLOCK_NOTE_MS:
        notes.append(
            f"rank clocks differ by up to {offset_ms:.1f} ms; arrivals aligned on collective ends"
        )
    skews = sorted(matched, key=lambda c: -c.skew_ms)
    rows = _rows(healthy, work, steps, stragglers, matched)
    slowest = healthy[int(np.argmax(work.mean(axis=1)))].rank if len(healthy) > 1 else None
    return CrossRank(
        ranks=tuple(rows),
        common_steps=tuple(steps),
        stragglers=tuple(stragglers),
        skews=tuple(skews[:TOP_SKEWS]),
        matched_collectives=len(matched),
        slowest_rank=slowest,
        failed=tuple(failed),
        notes=tuple(notes),
    )


def _rank(s: RankSummary) -> int:
    assert s.rank is not None  # the folder loader numbers every rank
    return s.rank


def _common_steps(summaries: list[RankSummary], drop_last: bool) -> list[int]:
    """Step numbers every rank has; without the last one when ranks stalled in it (they spent it
    waiting for a failed rank)."""
    if not summaries:
        return []
    common = set(summaries[0].step_numbers).intersection(*(s.step_numbers for s in summaries))
    steps = sorted(common)
    return steps[:-1] if drop_last else steps


def _at(s: RankSummary, values: np.ndarray, steps: list[int]) -> np.ndarray:
    index = {n: i for i, n in enumerate(s.step_numbers)}
    return np.array([values[index[n]] for n in steps], dtype=np.float64)


def _mean(s: RankSummary, values: np.ndarray, steps: list[int]) -> float:
    """Mean over ``steps`` (over all the rank's steps when none are shared)."""
    return round(float(_at(s, values, steps).mean() if steps else values.mean()), 3)


def _hung(s: RankSummary) -> bool:
    """Whether the rank's last step is a stall: far longer than its other steps, mostly waiting
    in a collective (what a rank does when a peer died under it)."""
    if s.n_steps < 2:
        return False
    last, wait = float(s.step_ms[-1]), float(s.wait_ms[-1])
    typical = float(np.median(s.step_ms[:-1]))
    return last > HANG_STEP_FACTOR * typical and wait > HANG_WAIT_SHARE * last


def _failures(
    summaries: list[RankSummary], known: list[FailedRank]
) -> tuple[list[FailedRank], list[str]]:
    """Ranks that failed, judged by the survivors: when some ranks stall in their last step, a
    rank with no trace, one that stops at an earlier step, or one that never entered the
    collective the stalled ranks wait in has failed. Without a stall, a missing or shorter trace
    is only noted (ranks are often profiled selectively)."""
    failed, notes = list(known), []
    bad = {f.rank for f in known}
    live = [s for s in summaries if s.rank not in bad and s.n_steps]
    hung = [s for s in live if _hung(s)]
    world = max((s.world_size or 0 for s in summaries), default=0)
    have = {s.rank for s in summaries} | bad
    absent = [r for r in range(world) if r not in have]
    last = max((s.step_numbers[-1] for s in live), default=0)
    early = [s for s in live if s.step_numbers[-1] < last]
    if not hung:
        if absent:
            notes.append(f"no trace for {len(absent)} of {world} ranks ({_ranges(absent)})")
        notes += [f"rank {_rank(s)}'s trace ends at step {s.step_numbers[-1]}" for s in early]
        return failed, notes
    found = _blamed(live, hung, absent, early, last)
    if not found:
        notes.append(
            f"ranks stalled in their last step for a rank not identified here ({_waited(hung)})"
        )
    return failed + found, notes


def _waited(hung: list[RankSummary]) -> str:
    return ", ".join(f"rank {_rank(s)} {s.step_ms[-1]:.0f} ms" for s in hung[:4])


def _blamed(
    live: list[RankSummary],
    hung: list[RankSummary],
    absent: list[int],
    early: list[RankSummary],
    last: int,
) -> list[FailedRank]:
    """With ranks stalled in step ``last``: the ranks with no trace, those whose trace stops
    earlier, and those that never entered the collective the stalled ranks wait in."""
    waited = _waited(hung)
    out = [
        FailedRank(r, f"no trace; the others stalled in their last step ({waited})") for r in absent
    ]
    out += [
        FailedRank(
            _rank(s), f"trace stops at step {s.step_numbers[-1]}; others reach {last}", s.path
        )
        for s in early
    ]
    entered = max(_calls_in(s, last) for s in hung)
    skip = {_rank(s) for s in hung} | {_rank(s) for s in early}
    out += [
        FailedRank(
            _rank(s),
            f"never entered collective {_calls_in(s, last) + 1} of step {last}, "
            f"which the others waited in ({waited})",
            s.path,
        )
        for s in live
        if _rank(s) not in skip and _calls_in(s, last) < entered
    ]
    return out


def _calls_in(s: RankSummary, step: int) -> int:
    return int(np.count_nonzero(s.collectives.steps == step))


def _ranges(ranks: list[int]) -> str:
    """'0, 2-7' for [0, 2, 3, 4, 5, 6, 7]."""
    out, start = [], ranks[0]
    for a, b in zip(ranks, [*ranks[1:], None], strict=True):
        if b != a + 1:
            out.append(str(start) if start == a else f"{start}-{a}")
            start = b if b is not None else a
    return ", ".join(out)


def _stragglers(
    summaries: list[RankSummary], work: np.ndarray, steps: list[int]
) -> list[StepStraggler]:
    if len(summaries) < 2:
        return []
    median = np.median(work, axis=0)
    top = np.argmax(work, axis=0)
    return [
        StepStraggler(
            step=n,
            rank=_rank(summaries[int(k)]),
            work_ms=round(float(work[k, j]), 3),
            median_work_ms=round(float(median[j]), 3),
        )
        for j, (n, k) in enumerate(zip(steps, top, strict=True))
    ]


def _match_collectives(
    summaries: list[RankSummary], steps: set[int]
) -> tuple[list[CollectiveSkew], float]:
    """Collectives present on every rank, matched by (step, kind, position in step), and the
    largest clock offset between ranks (ms).

    Ranks on different hosts may have different clocks. A GPU collective ends at (nearly) the
    same moment on every rank, whoever arrived last, so when the ends disagree by more than a
    typical step (clocks that cannot be the same), each rank's offset is the median difference of
    its collectives' ends from the first rank's, and arrivals are compared after removing it.
    """
    if len(summaries) < 2:
        return [], 0.0
    calls = [_calls_by_key(s, steps) for s in summaries]
    keys = sorted(set(calls[0]).intersection(*calls[1:]))
    if not keys:
        return [], 0.0
    start = np.array([[c[k][0] for k in keys] for c in calls])  # ranks x collectives
    end = np.array([[c[k][1] for k in keys] for c in calls])
    offset = np.median(end - end[0], axis=1)
    typical_step_us = 1000.0 * float(np.median(np.concatenate([x.step_ms for x in summaries])))
    if float(np.abs(offset).max()) < typical_step_us:
        # Same clock (one host, or synchronised hosts): trust it. Asynchronous CPU collectives
        # (gloo) end when their caller next waits, not together, so ends are no clock here.
        offset = np.zeros_like(offset)
    start = start - offset[:, None]
    last = np.argmax(start, axis=0)
    out = [
        CollectiveSkew(
            step=key[0],
            kind=key[1],
            index=key[2],
            last_rank=_rank(summaries[int(k)]),
            skew_ms=round(float(start[k, j] - start[:, j].min()) / 1000.0, 3),
            others_wait_ms=round(float((start[k, j] - start[:, j]).sum()) / 1000.0, 3),
            waits_ms=tuple(
                (_rank(summaries[i]), round(float(start[k, j] - start[i, j]) / 1000.0, 3))
                for i in range(len(summaries))
            ),
        )
        for j, (key, k) in enumerate(zip(keys, last, strict=True))
    ]
    return out, float(np.abs(offset).max()) / 1000.0


def _calls_by_key(
    s: RankSummary, steps: set[int]
) -> dict[tuple[int, str, int], tuple[float, float]]:
    """(start, end) in µs of each collective, keyed by (step, kind, position in step)."""
    seen: Counter[tuple[int, str]] = Counter()
    out = {}
    c = s.collectives
    ends = (c.start_us + c.dur_us).tolist()
    for step, kind, t0, t1 in zip(
        c.steps.tolist(), c.kinds, c.start_us.tolist(), ends, strict=True
    ):
        if step in steps:
            out[(step, kind, seen[(step, kind)])] = (t0, t1)
            seen[(step, kind)] += 1
    return out


def _rows(
    summaries: list[RankSummary],
    work: np.ndarray,
    steps: list[int],
    stragglers: list[StepStraggler],
    matched: list[CollectiveSkew],
) -> list[RankWork]:
    n = max(len(steps), 1)
    strag = Counter(s.rank for s in stragglers)
    last = Counter(c.last_rank for c in matched)
    caused: dict[int, float] = {}
    skew_wait: dict[int, float] = {}
    for c in matched:
        caused[c.last_rank] = caused.get(c.last_rank, 0.0) + c.others_wait_ms
        for rank, waited in c.waits_ms:
            skew_wait[rank] = skew_wait.get(rank, 0.0) + waited
    rows = []
    for i, s in enumerate(summaries):
        r = _rank(s)
        rows.append(
            RankWork(
                rank=r,
                step_ms=_mean(s, s.step_ms, steps),
                wait_ms=_mean(s, s.wait_ms, steps),
                work_ms=round(float(work[i].mean()), 3),
                exposed_comm_ms=round(s.exposed_comm_ms, 3),
                straggler_steps=strag[r],
                last_arrivals=last[r],
                caused_wait_ms=round(caused.get(r, 0.0) / n, 3),
                skew_wait_ms=round(skew_wait.get(r, 0.0) / n, 3),
            )
        )
    return rows
