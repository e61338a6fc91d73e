"""Rare long steps (``torchdoctor check``): a step many times the median of the steps measured
like it, made long by work that runs now and then in the loop (an evaluation, a checkpoint,
logging); or once, at the start of the job or of each epoch (``rules/one_off.py``).

The steps' times come from ``run.json``'s ``steps``, each less its data wait and the time its
thread and torch's intra-op threads waited for a core (``monitor.step_core_wait_ms``, read by
the step clock at every step boundary: a step is judged by what the CPU gave it); what ran in the long ones from the watcher's samples
of them (``monitor.long_step_samples``).
"""

from __future__ import annotations

import itertools
import math
from math import isfinite
from typing import TYPE_CHECKING

from torchdoctor.rules import same_cause as sc
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families._run import contended
from torchdoctor.rules.fixes import DOCS
from torchdoctor.rules.spec import FindingSpec, Measured, Once, RunRule, SameCause, Variant

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord
    from torchdoctor.rules.one_off import Per


def long_steps_fix(how_often: str, ratio: float, where: str) -> str:
    """Run the periodic work less often, on fewer batches, or outside the loop."""
    against = f"{ratio:.0f}x the median step" if isfinite(ratio) else "a step where most take 0 ms"
    return (
        f"# {how_often} ran up to {against}"
        + (f", in {where}" if where else "")
        + ":\n# periodic work in the loop (evaluation, checkpointing, logging): run it less often,"
        "\n# on fewer batches, or outside the timed loop"
    )


def _times(run: RunRecord, judged_by: list[tuple[int, float]], typical: float, ms: float) -> str:
    """After the median: ' (11.0x)'. Where that median reads 0.0 ms (a step of only waits) a
    ratio says nothing: where its steps waited for a core, the median step's wall clock and
    its waits (the steps ``judged_by``: those the median was taken over); else nothing."""
    from statistics import median

    if typical >= 0.05:
        return f" ({ms / typical:.1f}x)"
    steps = [i for i, _ in judged_by]
    core = _core_waits(run)
    wait = median(core.get(i, 0.0) for i in steps)
    if wait <= 0.0:
        return ""
    data = list(run.steps.data_wait_ms) + [0.0] * len(run.steps.step_ms)
    batch = median(data[i] for i in steps)
    return (
        f" (the median step: {median(run.steps.step_ms[i] for i in steps):.1f} ms wall clock, "
        f"{wait:.1f} ms of it waiting for a CPU core"
        + (f" and {batch:.1f} ms for its batch)" if batch >= 0.05 else ")")
    )


def once_fix(unit: Per, where: str) -> str:
    """Skip the start-up work the job does not need, or keep the loader's workers."""
    return _ONCE_FIX[unit] + (f"\n# (in it: {where})" if where else "")


_RAN = "step {step} took {ms:.1f} ms against a {median:.1f} ms median{times}"

SPEC = FindingSpec(
    id="rare-long-steps",
    label="rare long steps",
    title="{k} of {n} steps ran long: " + _RAN + ", {per_step:.1f} ms per step on average{ran}",
    probe="unscaled",
    threshold=th.RARE_LONG_RATIO,
    fix=long_steps_fix,
    explanation="A step many times the median is not the loop's own work: something ran "
    "in it now and then (evaluation, a checkpoint, logging). Its cost per step is its "
    "excess over the median, averaged over the steps.",
    doc_url=f"{DOCS}/profiler.html",
    variants=(
        ("once", Variant("{k} of {n} steps ran long, {when}: " + _RAN + "{ran}", fix=once_fix)),
    ),
    same_cause=(
        # first: where the iterator is rebuilt every step, check keeps this one (capture/fit.py);
        # the iterator's construction is inside the long step's time beyond its data wait
        SameCause("repeated-construction", sc.iterator_rebuilt),
        # this finding times a step less its data wait; the loader's saving is that wait
        SameCause("dataloader-config", sc.epoch_restart, disjoint=True),
    ),
)


def measure(run: RunRecord) -> Measured | None:
    """The longest step's ratio to the median of the steps measured like it (profiled or not);
    saving (ms/step): the long steps' excess over that median, averaged over every step
    considered. Long steps at the start of the job or at each epoch's start are a cost paid
    once per job or epoch (the ``once`` wording)."""
    from torchdoctor.rules.sites import relative_site

    candidates = _candidates(run)
    times = [t for _, t in candidates]
    if len(times) < 3:
        return None
    groups = _groups(run, candidates)
    judged = [
        (typical, i, t) for g in groups for typical, lg in [_long_in(g, times)] for i, t in lg
    ]
    if not judged:
        return None
    busy, waited = _by_work(run, candidates, groups, judged)
    busy, same = _by_lines(run, busy)
    # long steps that ran an ordinary step's CPU work, or its very lines while other processes
    # held the cores, waited for cores: dropped beside the ones that did more work; alone,
    # said for the record (the machine's, not the loop's)
    judged = [(typical, i, t) for typical, i, t, _, _ in busy] or judged
    load = _by_load(run, candidates, groups, judged)
    long = [(i, t) for _, i, t in judged]
    # the longest against its median; where medians are 0 ms, the longest step
    typical, worst_i, worst = max(
        judged, key=lambda x: (x[2] / x[0] if x[0] else float("inf"), x[2])
    )
    ratio = worst / typical if typical else float("inf")
    excess = sum(t - med for med, _, t in judged)
    per_step = excess / len(times)
    stacks = _stacks(run, [i + 1 for i, _ in long])
    where = [relative_site(s.split(" in ")[0]) + " in " + s.split(" in ")[-1] for s in stacks]
    ran = f"; in it: {where[0]}" if where else ""
    # other processes held the cores and the watcher saw nothing run in the long steps (it
    # samples a step long against the median of the moment, which the load moves): the load
    # may be all of it; said for the record, never a warning on a busy machine's say-so
    unseen = contended(run) if not stacks else None
    # a step that waited for a core most of its own time leaves too little to judge: less its
    # wait it is near 0 ms, so any step the load spared reads many times the median
    idle = None if busy else _same_lines(run, same) or _idle(waited)
    unseen = _starved(run, candidates) or load or idle or unseen
    every = _period([i for i, _ in long])
    core = _core_waits(run)
    work = {i: (w, usual) for _, i, _, w, usual in busy + same + waited if isfinite(w + usual)}
    evidence = {
        "long_steps": [
            {"step": i + 1, "ms": round(t, 3)}
            | ({"core_wait_ms": round(core[i], 3)} if i in core else {})
            | (
                {"cpu_work_ms": round(work[i][0], 3), "median_cpu_work_ms": round(work[i][1], 3)}
                if i in work
                else {}
            )
            for i, t in long
        ],
        "median_step_ms": typical,
        "steps_considered": len(times),
        "excess_ms_per_step": per_step,
        "every_n_steps": every,
        "sampled_stacks": stacks,
        "busy_machine": unseen,
    }
    title = {"k": len(long), "n": len(times), "ran": ran}
    per = _once_per(run, judged)
    if per is None:
        how_often = f"every {every} steps" if every else f"{len(long)} of {len(times)} steps"
        return Measured(
            value=ratio,
            saving_ms=per_step,
            title={
                **title,
                "step": worst_i + 1,
                "ms": worst,
                "median": typical,
                "times": _times(run, _judged_by(groups, candidates, worst_i), typical, worst),
                "per_step": per_step,
            },
            evidence=evidence,
            fix={
                "how_often": how_often,
                "ratio": ratio,
                "where": where[0] if where else "",
            },
            where=tuple(where[:3]),
            most="info" if unseen else None,
            # graded like with like: the excess against the loop's mean step less its waits
            # for a core, not the wall-clock mean a loaded machine inflates (its waits for a
            # batch stay: the user pays them; a loop of only data waits is not all excess)
            least=None if unseen else SPEC.severity.grade(per_step / _free_mean(run, candidates)),
        )
    unit, epoch_steps = per
    if unit == "job":  # name the start-up step, not a spike beside it
        typical, worst_i, worst = max(
            (x for x in judged if x[1] < th.ONE_OFF_FIRST_STEPS), key=lambda x: x[2] - x[0]
        )
    when = (
        "at the start of the run (paid once per job)"
        if unit == "job"
        else f"each the first of an epoch of {epoch_steps} batches"
    )
    # per job: the start-up steps' excess; per epoch: one restart's
    cost = _start_excess(judged) if unit == "job" else excess / len(long)
    return Measured(
        value=ratio,
        saving_ms=cost,
        title={
            **title,
            "when": when,
            "step": worst_i + 1,
            "ms": worst,
            "median": typical,
            "times": _times(run, _judged_by(groups, candidates, worst_i), typical, worst),
        },
        evidence={**evidence, "once_per": unit},
        fix={"unit": unit, "where": where[0] if where else ""},
        where=tuple(where[:3]),
        variant="once",
        once=Once(cost, unit, epoch_steps),
        most="info" if unseen else None,
    )


def _free_mean(run: RunRecord, candidates: list[tuple[int, float]]) -> float:
    """The mean step considered less its wait for a core (ms, never 0)."""
    core = _core_waits(run)
    free = [max(0.0, run.steps.step_ms[i] - core.get(i, 0.0)) for i, _ in candidates]
    return max(sum(free) / len(free), 1e-9)


def _candidates(run: RunRecord) -> list[tuple[int, float]]:
    """(0-based index, step time less its data wait and its wait for a core) of the steps
    considered: the first step (start-up) is never a candidate, nor are the warm-up steps of a
    run that compiled (compilation is named apart), the steps in which torchdoctor worked (its
    probe step, the profiler's first step) or the mode measurements after the window; waiting
    for a batch is the DataLoader finding's, and a step's thread waiting for a core (other
    processes held the cores: ``_core_waits``) is the machine's."""
    steps = run.steps
    waits = list(steps.data_wait_ms)
    waits += [0.0] * (len(steps.step_ms) - len(waits))
    core = _core_waits(run)
    times = [
        max(0.0, t - w - core.get(i, 0.0))
        for i, (t, w) in enumerate(zip(run.steps.step_ms, waits, strict=False))
    ]
    skip = 1
    if run.compile.compiles:  # the user's warm-up (the clean steps after it are candidates)
        sched = steps.schedule or {}
        warmup = steps.scheduled_warmup if "warmup" in sched else steps.warmup_steps
        skip = max(skip, warmup or 0)
    end = len(times) - steps.experiment_steps
    own = {n - 1 for n in steps.own_steps}
    for timed in (
        steps.timed.get("clean"),
        steps.timed.get("after"),
    ):  # steps that compiled: named apart
        if isinstance(timed, dict):
            own |= {int(n) - 1 for n in timed.get("compiled_steps") or []}
    return [(i, times[i]) for i in range(skip, end) if i not in own]


def _wait_shares(run: RunRecord, candidates: list[tuple[int, float]]) -> dict[int, float]:
    """0-based step -> the part of its time less its data wait that it waited for a core."""
    core = _core_waits(run)
    steps = run.steps
    waits = list(steps.data_wait_ms) + [0.0] * len(steps.step_ms)
    return {
        i: min(1.0, core[i] / own)
        for i, _ in candidates
        if i in core and (own := steps.step_ms[i] - waits[i]) > 0
    }


def _by_load(
    run: RunRecord,
    candidates: list[tuple[int, float]],
    groups: list[list[tuple[int, float]]],
    judged: list[tuple[float, int, float]],
) -> str | None:
    """Why the long steps cannot be told from the load, or None: the typical step waited for a
    core at least ``RARE_LONG_LOAD_SHARE`` of its time and the long steps do not stand apart
    from the others (the shortest is under ``RARE_LONG_APART`` times the longest of the rest).
    Under load a step's time off its wait is stretched too (with several intra-op threads the
    thread spins at the pool's barrier while a helper waits for a core: conv_lstm_step.py's
    8 ms steps ran about 230 ms each at load 1.8 of 2 cores), and by chance: its longest steps
    are the tail of that spread. Periodic work stretched by the same load still stands apart
    (an evaluation every 4 steps: 0.4-1 s against ordinary steps up to 52 ms)."""
    from statistics import median

    shares = _wait_shares(run, candidates)
    if len(shares) < 3 or (typical := median(shares.values())) < th.RARE_LONG_LOAD_SHARE:
        return None
    long = {i for _, i, _ in judged}
    rest = [t for g in groups for i, t in g if i not in long]
    shortest = min(t for _, _, t in judged)
    if not rest or shortest >= th.RARE_LONG_APART * max(rest):
        return None
    return (
        f"the typical step waited for a CPU core {typical:.0%} of its time and the long steps "
        f"(from {shortest:.0f} ms less their waits) do not stand apart from the rest (up to "
        f"{max(rest):.0f} ms): the tail of the load's spread, not periodic work"
    )


Worked = tuple[float, int, float, float, float]
"""(the median judged by, 0-based step, ms, its CPU work in ms, the median step's)."""


def _by_work(
    run: RunRecord,
    candidates: list[tuple[int, float]],
    groups: list[list[tuple[int, float]]],
    judged: list[tuple[float, int, float]],
) -> tuple[list[Worked], list[Worked]]:
    """The long steps split by the CPU work they ran (:func:`_cpu_work`): (those that did
    more work than the median step, or whose work is unknown; those that waited). A step
    waited when it ran under ``RARE_LONG_WORK_RATIO`` times the median step's work (of the steps
    it is judged by) and its time less its helpers' wait for a core (``cpu.step_threads_wait_ms``)
    is not long: other processes held the cores. The helpers' wait saturates at the thread's
    running time on a loaded machine (eval_in_loop.py's evaluation every 4 steps reads all of
    its time as that wait), the work does not: 6.6-33x the median step's there. The helpers'
    spin stays in the work: beside load that comes and goes a step that waited read up to
    11.7x, and stays judged as before. A step long by blocking (a sleep, I/O, a device sync)
    has no such wait and stays long. The work of each step of an older record is unknown:
    every long step stays (``busy``)."""
    from statistics import median

    work = _cpu_work(run)
    spun = _threads_waits(run)
    busy: list[Worked] = []
    waited: list[Worked] = []
    for typical, i, t in judged:
        base = [work[j] for j, _ in _judged_by(groups, candidates, i) if j in work and j != i]
        if i not in work or len(base) < 3:
            busy.append((typical, i, t, work.get(i, math.nan), math.nan))
            continue
        usual = median(base)
        own = t - spun.get(i, 0.0)
        row = (typical, i, t, work[i], usual)
        if work[i] < th.RARE_LONG_WORK_RATIO * usual and not _long(own, typical):
            waited.append(row)
        else:
            busy.append(row)
    return busy, waited


def _by_lines(run: RunRecord, busy: list[Worked]) -> tuple[list[Worked], list[Worked]]:
    """``busy`` split by what the watcher saw run in each step: (the rest; those that ran the
    ordinary steps' own call chains, :func:`_ordinary_share` at least
    ``RARE_LONG_ORDINARY_SHARE``, and waited for cores at least
    ``RARE_LONG_ORDINARY_WAIT_SHARE`` of their time: the loop's own work slowed by other
    processes, however much CPU time the spinning of its threads added)."""
    rest: list[Worked] = []
    same: list[Worked] = []
    for row in busy:
        i = row[1]
        share = _ordinary_share(run, i + 1)
        if share >= th.RARE_LONG_ORDINARY_SHARE and _waited_share(run, i) >= (
            th.RARE_LONG_ORDINARY_WAIT_SHARE
        ):
            same.append(row)
        else:
            rest.append(row)
    return rest, same


def _ordinary_share(run: RunRecord, step: int) -> float:
    """The share of the (1-based) step's samples whose user call chain the watcher also saw in
    steps that did not run long; 0.0 where unknown (an older record, too few ordinary steps)."""
    mon = run.monitor
    if mon.source not in (None, run.steps.source):
        return 0.0
    if mon.ordinary_steps < th.RARE_LONG_ORDINARY_MIN_STEPS or not mon.ordinary_chains:
        return 0.0
    rows = [r for r in mon.long_step_samples.get(str(step)) or [] if isinstance(r, dict)]
    total = sum(int(r.get("samples") or 0) for r in rows)
    seen = sum(int(r.get("samples") or 0) for r in rows if r.get("chain") in mon.ordinary_chains)
    return seen / total if total else 0.0


def _waited_share(run: RunRecord, i: int) -> float:
    """The part of (0-based) step ``i``'s wall time its thread and its helpers waited for a
    core (``monitor.step_core_wait_ms`` and ``cpu.step_threads_wait_ms``)."""
    ms = run.steps.step_ms[i]
    wait = _core_waits(run).get(i, 0.0) + _threads_waits(run).get(i, 0.0)
    return min(1.0, wait / ms) if ms > 0 else 0.0


def _same_lines(run: RunRecord, same: list[Worked]) -> str | None:
    """Why the long steps are the machine's: each ran the lines every step runs, waiting."""
    if not same:
        return None
    from torchdoctor.rules.sites import relative_site

    i = max(same, key=lambda x: x[2])[1]
    rows = run.monitor.long_step_samples.get(str(i + 1)) or [{}]
    line = (rows[0].get("stack") or [""])[0] if isinstance(rows[0], dict) else ""
    site, _, fn = line.partition(" in ")
    at = f" (at {relative_site(site)}" + (f" in {fn})" if fn else ")") if site else ""
    return (
        f"the long steps ran the call chains every step runs{at} and waited for CPU cores "
        f"(step {i + 1}: {_waited_share(run, i):.0%} of its {run.steps.step_ms[i]:.1f} ms; "
        "other processes held them): the loop's own work slowed by the machine, not periodic "
        "work"
    )


def _long(ms: float, typical: float) -> bool:
    """A step of ``ms`` is long against a median of ``typical``: ``RARE_LONG_RATIO`` times it
    and ``RARE_LONG_MIN_MS`` above it."""
    return ms >= th.RARE_LONG_RATIO * typical and ms - typical >= th.RARE_LONG_MIN_MS


def _idle(waited: list[Worked]) -> str | None:
    """Why the long steps are the machine's: each ran about the CPU work of the median step."""
    if not waited:
        return None
    _, i, t, w, usual = max(waited, key=lambda x: x[2])
    return (
        f"the long steps ran no more CPU work than the median step (step {i + 1}: {w:.1f} ms "
        f"run of its {t:.1f} ms, against {usual:.1f} ms): they waited for CPU cores "
        "(other processes held them), not periodic work"
    )


def _cpu_work(run: RunRecord) -> dict[int, float]:
    """0-based step -> ms of CPU work it ran: its thread's and its intra-op helpers' time on a
    core (``monitor.step_run_ms``) less the time its thread can have spun at a parallel
    region's barrier for a helper without a core (``cpu.step_threads_wait_ms``: an OpenMP
    thread spins there, running, before it sleeps). Empty for an older record."""
    runs = run.monitor.step_run_ms
    if runs is None or len(runs) != len(run.steps.step_ms):
        return {}
    spun = _threads_waits(run)
    return {
        i: max(0.0, float(r) - spun.get(i, 0.0))
        for i, r in enumerate(runs)
        if isinstance(r, (int, float)) and isfinite(r)
    }


def _threads_waits(run: RunRecord) -> dict[int, float]:
    """0-based step -> ms its helpers waited for a core beyond its own wait, up to its thread's
    running time (``cpu.step_threads_wait_ms``); empty where not recorded."""
    waits = run.cpu.get("step_threads_wait_ms")
    if not isinstance(waits, list) or len(waits) != len(run.steps.step_ms):
        return {}
    return {
        i: max(0.0, float(w))
        for i, w in enumerate(waits)
        if isinstance(w, (int, float)) and isfinite(w)
    }


def _starved(run: RunRecord, candidates: list[tuple[int, float]]) -> str | None:
    """Why the steps' own times cannot be told from the load: the typical step considered
    waited for a core at least ``RARE_LONG_STARVED_SHARE`` of its time less its data wait (the step
    clock's per-step reading); None otherwise."""
    from statistics import median

    shares = list(_wait_shares(run, candidates).values())
    if len(shares) < 3 or (typical := median(shares)) < th.RARE_LONG_STARVED_SHARE:
        return None
    return (
        f"the typical step waited for a CPU core {typical:.0%} of its own time "
        "(other processes held the cores)"
    )


def _core_waits(run: RunRecord) -> dict[int, float]:
    """0-based step -> ms its thread waited for a core: every step's, read by the step clock at
    its boundaries (``monitor.step_core_wait_ms``), or in an older record the long steps' the
    watcher read while it sampled them (``monitor.long_step_core_wait``)."""
    each = step_core_waits(run)
    if each is not None:
        return {i: w for i, w in enumerate(each) if w is not None}
    rows = run.monitor.long_step_core_wait
    if rows is None or run.monitor.source not in (None, run.steps.source):
        return {}
    out = {}
    for step, row in rows.items():
        try:
            out[int(step) - 1] = max(0.0, float(row["core_wait_ms"]))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def step_core_waits(run: RunRecord) -> list[float | None] | None:
    """Each step's wait for a core (ms, None where unknown), aligned with ``steps.step_ms``;
    None when the record has no such reading for its steps."""
    waits = run.monitor.step_core_wait_ms
    if waits is None or len(waits) != len(run.steps.step_ms):
        return None
    return [max(0.0, float(w)) if isinstance(w, (int, float)) else None for w in waits]


def _groups(run: RunRecord, candidates: list[tuple[int, float]]) -> list[list[tuple[int, float]]]:
    """The candidates split by the condition they ran under: inside the profiled window (the
    profiler records every operator, a cost that varies step to step) and outside it. A step is
    judged against the median of its own group, never against steps measured differently.
    A run with a clean window is judged on the steps no instrument touched alone: a profiled
    step made long by the profiler (its start, a buffer flush) is not the user's."""
    window = run.steps.window
    if window is None:
        return [candidates]
    lo, hi = window[0] - 1, window[1] - 1  # 0-based, inclusive
    inside = [(i, t) for i, t in candidates if lo <= i <= hi]
    outside = [(i, t) for i, t in candidates if not lo <= i <= hi]
    if run.steps.timed.get("clean") and len(outside) >= 3:
        return [outside]
    return [g for g in (outside, inside) if g]


def _judged_by(
    groups: list[list[tuple[int, float]]], candidates: list[tuple[int, float]], step: int
) -> list[tuple[int, float]]:
    """The steps whose median ``step`` (0-based) is judged by (:func:`_long_in`)."""
    group = next((g for g in groups if any(i == step for i, _ in g)), candidates)
    return group if len(group) >= 3 else candidates


def _long_in(
    group: list[tuple[int, float]], everyone: list[float]
) -> tuple[float, list[tuple[int, float]]]:
    """(the median the group is judged by, its steps at least RARE_LONG_RATIO times it). A
    group of fewer than three steps has no median of its own: it is judged by every step's
    (the unprofiled steps are the cheaper ones, so that baseline is never too low for them);
    none where long steps are not rare."""
    from statistics import median

    times = [t for _, t in group]
    typical = median(times) if len(times) >= 3 else median(everyone)
    long = [(i, t) for i, t in group if _long(t, typical)]
    rare = len(long) <= th.RARE_LONG_MAX_SHARE * max(len(times), 3)
    return typical, long if rare else []


_ONCE_FIX = {
    "job": "# start-up work in the first steps (an evaluation at iteration 0, a warm-up, workers "
    "starting),\n# paid once per job: skip or shorten it at step 0 if the job does not need it "
    "(e.g. evaluate\n# when step > 0 and step % eval_interval == 0), else it is the job's "
    "fixed cost",
    "epoch": "# the first step of each epoch waits for a new iterator (its workers start again):"
    "\n# DataLoader(..., num_workers=N, persistent_workers=True) keeps the workers across "
    "epochs",
}


def _start_excess(judged: list[tuple[float, int, float]]) -> float:
    """The excess (ms) of the long steps among the run's first ``ONE_OFF_FIRST_STEPS``."""
    return sum(t - med for med, i, t in judged if i < th.ONE_OFF_FIRST_STEPS)


def _once_per(
    run: RunRecord, judged: list[tuple[float, int, float]]
) -> tuple[Per, int | None] | None:
    """``("job", None)`` when the long steps among the run's first ``ONE_OFF_FIRST_STEPS`` hold
    ``ONE_OFF_EXCESS_SHARE`` of the excess: start-up work; ``("epoch", batches)`` when each
    long step is the first (or next) step of an epoch of the feeding loader; None when they
    recur otherwise. ``judged``: (median, 0-based step, ms) of each long step."""
    total = sum(t - med for med, _, t in judged)
    if total > 0 and _start_excess(judged) >= th.ONE_OFF_EXCESS_SHARE * total:
        return "job", None
    from torchdoctor.rules.one_off import batches_per_epoch

    long = [i for _, i, _ in judged]
    per_epoch = batches_per_epoch(run)
    if not per_epoch or per_epoch < 2 * th.ONE_OFF_FIRST_STEPS or not long:
        return None
    if all(i >= per_epoch - 1 and min(i % per_epoch, per_epoch - i % per_epoch) <= 1 for i in long):
        return "epoch", per_epoch
    return None


def _period(indices: list[int]) -> int | None:
    """The step interval between long steps when it is regular (two or more gaps alike)."""
    gaps = {b - a for a, b in itertools.pairwise(indices)}
    return gaps.pop() if len(indices) >= 3 and len(gaps) == 1 else None


def _stacks(run: RunRecord, steps: list[int]) -> list[str]:
    """The user lines the watcher sampled most often during these (1-based) steps: the
    outermost sampled user frame, i.e. the loop's own line, most frequent first."""
    if run.monitor.source not in (None, run.steps.source):
        return []
    samples = run.monitor.long_step_samples
    counts: dict[str, int] = {}
    for step in steps:
        for row in samples.get(str(step)) or []:
            stack = row.get("stack") or []
            if stack:
                # the outermost user frame (the loop's own line), then the innermost one
                for line in dict.fromkeys((stack[-1], stack[0])):
                    counts[line] = counts.get(line, 0) + int(row.get("samples") or 0)
    return sorted(counts, key=lambda k: -counts[k])


RULES = (RunRule(SPEC, measure),)
