"""CPU (gloo) collectives: one call counted once per step, whatever the backend thread's timing.

A gloo collective shows twice in a trace: the caller's ``c10d::allreduce_`` and the backend's
``gloo:all_reduce`` on a worker thread, which starts a little later (inside or after the caller's
range, by chance) and can close in the next step. The timings below are those of a recorded
2-rank DDP run in which rank 1 raised in step 3 and the old count missed it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.core.synth import annotation, cpu_op, write_trace
from torchdoctor.commands.analyze.ranks import summarize_file
from torchdoctor.commands.analyze.trace import analyze_path

STEP_US = 3000.0
T0 = 1000.0


def _gloo(ts: float, dur: float, step: int) -> dict[str, Any]:
    return {**cpu_op("gloo:all_reduce", ts, dur), "tid": 200 + step % 2}  # workers alternate


def _step(k: int, arrive: float, gloo_delay: float, gloo_dur: float) -> list[dict[str, Any]]:
    """Step ``k``: own work, then the caller's all-reduce at ``arrive`` (µs into the step) and
    the backend's range ``gloo_delay`` after it."""
    t = T0 + k * STEP_US
    return [
        annotation(f"ProfilerStep#{k}", t, STEP_US),
        cpu_op("aten::mm", t + 100, arrive - 200),
        cpu_op("c10d::allreduce_", t + arrive, 150),
        _gloo(t + arrive + gloo_delay, gloo_dur, k),
    ]


def _write(path: Path, rank: int, events: list[dict[str, Any]]) -> Path:
    info = {"rank": rank, "world_size": 2, "backend": "gloo"}
    return write_trace(path, events, distributedInfo=info)


def test_a_call_counts_once_whether_or_not_the_worker_range_nests_in_the_callers(
    tmp_path: Path,
) -> None:
    # rank 0's gloo range starts inside its c10d range in even steps, rank 1's in odd ones; in
    # step 1 rank 1 arrives 500 µs after rank 0
    ev: list[list[dict[str, Any]]] = [[], []]
    for k in range(4):
        for r in (0, 1):
            nested = (k + r) % 2 == 0
            late = 500.0 if (k, r) == (1, 1) else 0.0
            ev[r] += _step(k, 2000.0 + late, 50.0 if nested else 200.0, 300.0)
    paths = [_write(tmp_path / f"rank{r}.json", r, ev[r]) for r in (0, 1)]
    for p in paths:
        s = summarize_file(str(p)).summary
        assert s is not None
        assert s.collectives.steps.tolist() == [0, 1, 2, 3]
    cr = analyze_path(tmp_path, jobs=1).cross_rank
    assert cr is not None
    step1 = next(c for c in cr.skews if c.step == 1)
    assert (step1.last_rank, step1.skew_ms) == (1, 0.5)


def test_the_rank_that_raised_is_failed_when_the_last_worker_range_spills_into_the_stall(
    tmp_path: Path,
) -> None:
    ev: list[list[dict[str, Any]]] = [[], []]
    for k in range(3):
        ev[0] += _step(k, 2000.0, 50.0, 800.0)
        ev[1] += _step(k, 2000.0, 200.0, 800.0)
    t3 = T0 + 3 * STEP_US
    # rank 0: step 2's worker range closes 1050 µs into step 3, after step 3's call began at
    # 1000 µs; step 3's worker range starts at 1100 µs and waits 1.9 s for rank 1
    ev[0][-1]["dur"] = t3 + 1050.0 - ev[0][-1]["ts"]
    ev[0] += [
        annotation("ProfilerStep#3", t3, 1_901_500.0),
        cpu_op("aten::mm", t3 + 100, 800.0),
        cpu_op("c10d::allreduce_", t3 + 1000.0, 150.0),
        _gloo(t3 + 1100.0, 1_900_000.0, 3),
    ]
    # rank 1 sleeps a second in step 3 and raises before its forward: no event inside
    ev[1].append(annotation("ProfilerStep#3", t3, 1_000_000.0))
    for r in (0, 1):
        _write(tmp_path / f"rank{r}.json", r, ev[r])
    cr = analyze_path(tmp_path, jobs=1).cross_rank
    assert cr is not None
    assert [(f.rank, f.reason.split(",")[0]) for f in cr.failed] == [
        (1, "never entered collective 1 of step 3")
    ]
    assert not any("not identified" in n for n in cr.notes)
