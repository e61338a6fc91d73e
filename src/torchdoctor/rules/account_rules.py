"""The step's account: how much of the step its compute explains (the roofline), how much the
named findings claim, and what is left: the ``unexplained-step-time`` finding names where that
time goes (the user's lines and what runs under them).

    allowance  = min(step, eager traffic floor / EXPLAINED_EFFICIENCY,  # operators near their
                     torch operators + torch's own Python)   # floor, only where compute runs
                 (+ the time of one dominant operator whose FLOPs could not be counted:
                  rules/assumed_compute.py)
    named      = min(step, sum of the other actionable findings' savings)
    contention = time the training thread waited for a CPU (other processes held them)
    unexplained = max(0, step - allowance - named - contention)

The step is the median of the measured steps, and the line table's categories are the window's
mix of time scaled to it. Where the step clock read each step's wait for a core
(``monitor.step_core_wait_ms``) the categories of time with a core are scaled to the median
step's own time (that step less its wait), and its wait is the contention: on a loaded machine
one step of the window that waited little, or long, would otherwise set the mix of the median
one.

The allowance uses the eager traffic floor (every operator's counted work, op by op: what the
operators as run need); the efficiency reported is against the fusion floor (``record.floors``),
which no implementation beats, and the gap between the two is what fusion could save.

A step is *explained* when its roofline is known and the unexplained time is under
``UNEXPLAINED_SHARE`` of it; only then may a report say that nothing holds it back. Without a
roofline (compiled code, an unknown GPU) the torch operators' time stands in for the allowance
(their efficiency unknown), so time outside operators still shows as unexplained. Plain data;
runs on the merged findings of ``check``'s report.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torchdoctor.record.floors import step_floors
from torchdoctor.record.lines import LineRow
from torchdoctor.record.run import RunRecord
from torchdoctor.record.typed import Row
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.account_inputs import Account, python_ms_of_framework
from torchdoctor.rules.assumed_compute import assumed_compute
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.run_common import make

UNEXPLAINED_ID = "unexplained-step-time"


@dataclass(frozen=True)
class TopLine(Row):
    """A user line holding some of the step's unexplained time, and what runs under it."""

    site: str
    function: str
    code: str
    self_ms: float
    inclusive_ms: float
    unexplained_ms: float
    runs: str
    """What runs under it most of its self time: ``torch ops``, ``Python``, ``I/O``..."""
    ops: list[str] = field(default_factory=list)
    """The torch operators under it, most first (at most three)."""


@dataclass(frozen=True)
class StepAccount:
    """Where one rank's mean step goes, in ms per step."""

    step_ms: float
    roofline_ms: float | None
    """The step's floor: the fusion floor where FLOPs were counted, else the eager traffic floor;
    None when nothing could be counted."""
    efficiency: float | None
    """``roofline_ms / step_ms``."""
    flops_share: float | None
    bytes_share: float | None
    attainable: str
    """Where the attainable rates come from, or why there are none."""
    allowance_ms: float
    named_ms: float
    contention_ms: float
    """Time the training thread waited for a CPU held by others: explained, by the machine."""
    unexplained_ms: float
    explained: bool
    categories: dict[str, float] = field(default_factory=dict)
    """The line table's totals (ms per step): torch ops, Python, I/O, sleep/wait, gc."""
    top_lines: list[TopLine] = field(default_factory=list)
    """The lines holding most of the unexplained time, with what runs under each."""
    floor: str = "eager traffic floor"
    """Which floor ``roofline_ms`` is: ``fusion floor`` or ``eager traffic floor``."""
    eager_traffic_ms: float | None = None
    """Every eager operator's counted work at the attainable rates (the allowance's basis)."""
    fusion_gain_ms: float | None = None
    """Eager traffic floor minus fusion floor: the most fusion (torch.compile) could save."""
    mfu: float | None = None
    """Counted FLOP/s over the datasheet dense peak (``record.floors.StepFloors``)."""
    assumed_compute: dict[str, Any] | None = None
    """A dominant operator whose FLOPs could not be counted, whose time is taken as compute
    (``rules/assumed_compute.py``); None when there is none."""
    threads_wait_ms: float = 0.0
    """Operator time lost to intra-op threads waiting for one another on cores other processes
    held (:func:`threads_wait`): explained, by the machine and the thread count."""
    threads_wait_from: str | None = None
    """Where ``threads_wait_ms`` was taken from, in words (the thread probe, or the threads'
    own wait for a core and why not the probe); None when there was no such wait to take."""

    @property
    def unexplained_share(self) -> float:
        return self.unexplained_ms / self.step_ms if self.step_ms else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``report.json``'s ``account``."""
        return {**asdict(self), "unexplained_share": round(self.unexplained_share, 4)}


def step_account(record: dict[str, Any], findings: list[Finding]) -> StepAccount | None:
    """The account of ``record``'s mean step given the merged ``findings``; None without steps."""
    run = RunRecord.from_dict(record)
    median = run.steps.median_step_ms
    # The median step, as the roofline's efficiency: a step slowed by a neighbour on a shared
    # machine does not make the others unexplained (rare long steps are a finding of their own).
    step = median if median is not None and median > 0 else run.step_ms
    if not step:
        return None
    acc = Account.from_record(run)
    roofline = acc.roofline
    categories = dict(acc.lines.categories)
    roof = roofline.roofline_ms
    floors = step_floors(run, step)
    contention = min(step, categories.get("CPU contention", 0.0))
    own = _own_step(run)
    scale = 1.0  # the categories of time with a core, to the median step's own time
    if own is not None and step - contention > 0:
        scale, contention = own / (step - contention), step - own
    # The roofline explains compute: the time inside torch operators and torch's own Python
    # around them, never the user's Python, I/O, sleeps or collections (when sampled).
    compute = (categories.get("torch ops", 0.0) + python_ms_of_framework(acc.lines)) * scale
    assumed = assumed_compute(acc) if roof is not None else None
    if roof is not None:
        allowance = min(step, roof / th.EXPLAINED_EFFICIENCY + (assumed.ms if assumed else 0.0))
        if acc.lines.rows:
            allowance = min(allowance, compute)
    else:
        allowance = min(step, compute)
    # Findings for the record (info) explain nothing: they are not worth fixing.
    named = min(
        step,
        sum(
            f.saving_ms_per_step
            for f in findings
            if f.id != UNEXPLAINED_ID and f.severity != "info"
        ),
    )
    ops_ms = categories.get("torch ops", 0.0) * scale
    threads, threads_from = threads_wait(run, findings, ops_ms, ops_ms - allowance)
    unexplained = max(0.0, step - allowance - named - contention - threads)
    fusion = floors.fusion if floors is not None else None
    # never more than the step's time above the floor no implementation beats: a step at 87%
    # of the fusion floor leaves 13% to save, whatever the sampler put under Python
    floor = fusion.floor_ms if fusion is not None else roof
    if floor is not None:
        unexplained = min(unexplained, max(0.0, step - floor))
    excess = max(0.0, 1.0 - allowance / ops_ms) if ops_ms > 0 else 0.0
    return StepAccount(
        step_ms=step,
        roofline_ms=fusion.floor_ms if fusion is not None else roof,
        efficiency=min(1.0, fusion.floor_ms / step) if fusion is not None else roofline.share,
        flops_share=roofline.flops_share,
        bytes_share=roofline.bytes_share,
        attainable=roofline.attainable_source or roofline.unavailable or "not counted",
        allowance_ms=round(allowance, 4),
        named_ms=round(named, 4),
        contention_ms=round(contention, 4),
        threads_wait_ms=round(threads, 4),
        threads_wait_from=threads_from,
        unexplained_ms=round(unexplained, 4),
        explained=roof is not None and unexplained < th.UNEXPLAINED_SHARE * step,
        categories=categories,
        top_lines=_top_lines(acc, excess),
        floor="fusion floor" if fusion is not None else "eager traffic floor",
        eager_traffic_ms=roof,
        fusion_gain_ms=floors.fusion_gain_ms if floors is not None else None,
        mfu=floors.mfu if floors is not None else None,
        assumed_compute=assumed.to_dict() if assumed is not None else None,
    )


def threads_wait(
    run: RunRecord, findings: list[Finding], ops_ms: float, beyond_ms: float
) -> tuple[float, str | None]:
    """ms per step of the operators' time (``ops_ms``) lost to intra-op threads waiting for one
    another, and where that figure comes from (None: nothing taken). Each parallel operator
    waits for its last thread, and a thread without a core holds it for a time slice, not for
    its share of the work (the thread that waits spins at the barrier, so its own wait for a
    core does not show it). At most ``beyond_ms`` (the operators' time beyond the roofline's
    allowance); 0 on a GPU run (the operators' host time is launches, not parallel regions) or
    where ``cpu-oversubscribed`` claims that time as a warning or critical (its saving is
    named). Two measurements say how much:

    - the thread probe's median slow-down of the script's thread count over fewer
      (``cpu.thread_probe``, interleaved, the same small work): ``ops_ms * (1 - 1 / ratio)``,
      nothing below ``OVERSUBSCRIBED_RATIO``;
    - the script's own median step: its helpers' wait for a core while its thread ran or
      waited itself (``cpu.step_threads_wait_ms``, from the per-step schedstat the step clock
      reads; ``cpu_usage.step_threads_wait_s``): an upper bound of the same wait, measured on
      the script's operators rather than the probe's.

    Where the steps' wait is known it is the figure, but for a probe that measured a slow-down
    (no error, no failed label, ``OVERSUBSCRIBED_RATIO`` or more) and says less: the smaller
    of the two. A probe that found none is not taken as none: on a busy machine its
    sub-millisecond work runs between other processes' time slices or is held up by one
    (2 threads against 1, interleaved in one process at load 20: the probe's work 0.8x
    [0.4-549x] while a whole batched-conv step ran 5.9x slower;
    ``benchmarks/bench_thread_probe_contended.py``), which says nothing of the script's
    longer regions. Without the steps' wait (an older record) the probe's ratio is taken,
    failed label or not: it is not bounded by the thread count on a busy machine
    (conv_lstm_step.py's own step, 1 and 2 threads interleaved at load 22, ran 9.4x slower
    with 2, its probe 10.6x)."""
    if run.gpu is not None:
        return 0.0, None
    if any(f.id == "cpu-oversubscribed" and f.severity != "info" for f in findings):
        return 0.0, None
    probe = run.cpu.get("thread_probe") or {}
    probe = probe if isinstance(probe, dict) else {}
    ratio = probe.get("ratio_median")
    ratio = float(ratio) if isinstance(ratio, (int, float)) else None
    from torchdoctor.rules.cpu_rules import implausible_probe

    failed = probe.get("error") or probe.get("failed") or implausible_probe(probe)
    slowed = ratio is not None and ratio >= th.OVERSUBSCRIBED_RATIO
    by_probe = ops_ms * (1.0 - 1.0 / ratio) if ratio is not None and slowed else 0.0
    probe_said = (
        f"the thread probe: {ratio or 0.0:.1f}x slower with {probe.get('threads_a')} threads"
    )
    own = _median_of(run, run.cpu.get("step_threads_wait_ms"))
    if own is not None:
        if slowed and not failed and by_probe <= own:
            ms, said = by_probe, probe_said
        else:
            if slowed and not failed:
                why = f"its {by_probe:.1f} ms is more than they waited"
            elif probe.get("error"):
                why = f"it failed ({probe['error']})"
            elif ratio is None:
                why = "it did not run"
            elif failed:
                why = f"its {ratio:.1f}x is labelled failed"
            else:
                why = f"it read {ratio:.1f}x, no slow-down, its short work fitting between time slices"
            ms = own
            said = (
                f"the threads' own wait for a core in the median step, not the thread probe: {why}"
            )
    elif ratio is not None and slowed:
        ms = by_probe
        said = probe_said if not failed else f"{probe_said} (labelled failed)"
    else:
        return 0.0, None
    ms = max(0.0, min(beyond_ms, ms))
    return (ms, said) if ms > 0 else (0.0, None)


def _own_step(run: RunRecord) -> float | None:
    """The median measured step's own time (ms): the step of median wall time (the two middle
    ones' mean) less its thread's and helpers' wait for a core; None where a measured step's
    wait is unknown."""
    from torchdoctor.rules.families.long_steps import step_core_waits

    waits = step_core_waits(run)
    if waits is None:
        return None
    steps = run.steps.step_ms
    return _median_of(
        run, [None if w is None else t - min(t, w) for t, w in zip(steps, waits, strict=True)]
    )


def _median_of(run: RunRecord, per_step: Any) -> float | None:
    """The mean of ``per_step``'s values (one per step, as ``steps.step_ms``) at the measured
    steps of median wall time (the middle one, or the two middle ones); None where one of the
    measured steps' values is unknown."""
    steps = run.steps
    lo, hi = steps.warmup_steps, steps.warmup_steps + steps.measured_steps
    if not isinstance(per_step, list) or hi <= lo or len(per_step) < hi:
        return None
    values = per_step[lo:hi]
    if not all(isinstance(v, (int, float)) for v in values) or len(steps.step_ms) < hi:
        return None
    ranked = sorted(zip(steps.step_ms[lo:hi], values, strict=True))
    middle = {(len(ranked) - 1) // 2, len(ranked) // 2}
    return sum(float(ranked[i][1]) for i in middle) / len(middle)


def _top_lines(acc: Account, ops_excess: float, n: int = 5) -> list[TopLine]:
    """Rows ranked by their unexplained self time: everything but torch operators, plus the
    operators' time beyond the roofline allowance (shared out in proportion)."""
    out: list[TopLine] = []
    for r in acc.lines.rows:
        ops = r.under.get("torch ops", 0.0)
        rest = sum(v for k, v in r.under.items() if k not in ("torch ops", "CPU contention"))
        out.append(
            TopLine(
                site=r.site,
                function=r.function,
                code=r.code,
                self_ms=r.self_ms,
                inclusive_ms=r.inclusive_ms,
                unexplained_ms=round(rest + ops * ops_excess, 4),
                runs=main_category(r),
                ops=[o[0] for o in r.ops[:3]],
            )
        )
    out.sort(key=lambda x: -x.unexplained_ms)
    # Lines with a tenth of the top line's unexplained time or more: the rest is noise.
    floor = 0.1 * out[0].unexplained_ms if out else 0.0
    return [x for x in out if x.unexplained_ms > 0 and x.unexplained_ms >= floor][:n]


def main_category(row: LineRow) -> str:
    """What runs under a line table row most of its self time (``torch ops``, ``Python``...):
    what ran with a core, never the wait for one (a line of torch operators on a busy machine
    is still torch operators; its wait is no part of its unexplained time)."""
    under = {c: ms for c, ms in row.under.items() if c != "CPU contention"}
    return max(under, key=lambda c: under[c]) if under else "Python"


def unexplained(record: dict[str, Any], findings: list[Finding]) -> Finding | None:
    """The ``unexplained-step-time`` finding (``rules/families/unexplained.py``), or None when
    the account leaves less than its spec's share of the step unexplained."""
    from torchdoctor.rules.families.unexplained import RULES

    run = RunRecord.from_dict(record)
    for rule in RULES:
        m = rule.measure((step_account(record, findings), run.step_ms))
        if m is not None and rule.fires(m):
            s = rule.spec
            return make(
                run,
                s.id,
                s.format_title(**m.title),
                m.saving_ms,
                m.evidence,
                s.fix(**m.fix),
                where=list(m.where),
            )
    return None


def account_verdict(line: str, account: dict[str, Any] | None) -> str:
    """``line`` with its clean bill replaced when the step is not explained: no report says
    that nothing holds a step back unless its time is accounted for."""
    # the verdict's two wordings without a time bottleneck (report/assemble.py)
    clean = next(
        (
            c
            for c in ("No bottleneck worth fixing found.", "No time bottleneck found.")
            if c in line
        ),
        None,
    )
    if clean is None or not account or "error" in account or account.get("explained"):
        return line
    eff = account.get("efficiency")
    top = (account.get("top_lines") or [{}])[0]
    where = (
        f"; most of it at {top['site'].rsplit('/', 1)[-1]} ({top['runs']})"
        if top.get("site")
        else ""
    )
    if eff is None:
        why = f"no named bottleneck, but the efficiency is unknown ({account.get('attainable')})"
    else:
        why = f"no named bottleneck, but the step runs at {eff:.0%} of its roofline"
    return line.replace(clean, f"Not a clean bill: {why}{where}.")
