"""The DataLoader in a check run (``torchdoctor check``): ``dataloader-config``, the loader that
fed the measured steps and the change that removes the wait it caused, chosen from what was
measured; and ``torch-warning``, torch's own warnings about a loader's settings.

What ``check`` records per loader (``usage``): epochs started and their start-up time, batches
and waits in the measured steps, the workers' CPU and run-queue time in the window, and a batch
made and timed in the training process after the steps (``main_process_batch``). From those:

1. workers restarted every epoch (not persistent) and the restarts are most of the wait:
   ``persistent_workers=True``, or no workers where a batch costs less than a hand-off;
2. workers idle while the step waits, and a batch made in the training process costs less than
   the wait: fewer workers (``num_workers=0``);
3. workers that make batches as fast as the fastest step uses them: the wait left is each
   batch's hand-off, which no setting removes (info);
4. as many workers as the rank's CPUs, busy: make each item cheaper, with its measured cost;
5. otherwise more workers, as many as the measured batch cost needs against the fastest step's
   compute, up to the rank's CPUs; for items measured to wait rather than compute (I/O, a
   sleep: ``ITEMS_WAIT_SHARE``), beyond them, up to ``WAITING_WORKERS_MAX``.

A wait too small to matter on a CUDA run still gets ``pin_memory`` when the loader lacks it.

The thresholds judge the wait net of what the CPU withheld (``fetch_core_wait``): where the line
sampler saw the training thread inside a loader's ``__next__`` waiting for a core that other
processes held, that part of the wait is the machine's, not the loader's, and no setting of the
loader removes it. A wait that is mostly such is said as info (``busy`` wording).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.cpu_rules import contention
from torchdoctor.rules.families._common import LOADER_FRAMEWORKS
from torchdoctor.rules.spec import (
    FindingSpec,
    Gate,
    Measured,
    RunRule,
    SeverityPolicy,
    Variant,
)
from torchdoctor.rules.user_fixes import (
    dataloader_user_fix,
    item_cost_ms,
    loader_changes,
    rebuilt_loader_call,
)

if TYPE_CHECKING:
    from torchdoctor.record.run import LoaderConfig, RunRecord

DOCS = f"{fx.DOCS}/data.html#multi-process-data-loading"


def restart_fix(loader: LoaderConfig, batch_ms: float | None = None) -> str:
    """The user's call with ``persistent_workers=True``; without workers where a batch made in
    the training process (``batch_ms``) costs less than a hand-off from one."""
    if batch_ms is not None:
        return f"{fewer_workers_fix(loader, batch_ms)}\n# and no worker to start again each epoch"
    call = rebuilt_loader_call(loader, {"persistent_workers": "True"})
    return f"{call}\n# workers started once, kept across epochs"


WORKER_ONLY = ("num_workers", "prefetch_factor", "persistent_workers", "multiprocessing_context")
"""The call's arguments dropped for no workers: DataLoader raises for the last three without."""


def fewer_workers_fix(loader: LoaderConfig, batch_ms: float) -> str:
    """The user's call without workers (and the arguments only workers take)."""
    call = rebuilt_loader_call(loader, dict.fromkeys(WORKER_ONLY))
    return (
        f"{call}\n# no workers: a batch costs {batch_ms:.2f} ms to make in the training process; "
        "handing it over\n# from a worker costs more, and idle workers compete for the cores"
    )


def config_fix(
    loader: LoaderConfig,
    workers: int,
    cuda: bool,
    step_ms: float = 0.0,
    wait_ms: float = 0.0,
    item_ms: float | None = None,
    on_cpu: float | None = None,
    batch_ms: float | None = None,
) -> str:
    """The user's call with the workers the batch's cost needs (``user_fixes.dataloader_user_fix``);
    for items that wait (``on_cpu`` under ``ITEMS_WAIT_SHARE`` of a batch's ``batch_ms``),
    workers beyond the CPUs, and what is left once they reach ``WAITING_WORKERS_MAX``."""
    current = loader.num_workers
    compute = max(step_ms - wait_ms, 0.1)
    if on_cpu is None or on_cpu >= th.ITEMS_WAIT_SHARE or not batch_ms:
        if on_cpu is None or not batch_ms:
            return dataloader_user_fix(loader, workers, cuda, step_ms, wait_ms, item_ms)
        # measured: the items compute, so the I/O escape of the generic wording is not theirs
        why = (
            f"its items compute ({on_cpu:.0%} of a batch's {batch_ms:.1f} ms on a CPU, against "
            f"{compute:.1f} ms of compute a step), so more workers will not help"
        )
        return dataloader_user_fix(loader, workers, cuda, step_ms, wait_ms, item_ms, why)
    every = batch_ms / max(workers, current, 1)
    waits = (
        f"a batch costs {batch_ms:.1f} ms to make, {1 - on_cpu:.0%} of it waiting (I/O, a sleep), "
        "not computing"
    )
    lines = []
    if current >= workers:
        lines.append(
            f"# num_workers={current} already: {waits}; workers beyond the CPUs help such "
            f"items, up to {int(th.WAITING_WORKERS_MAX)} (each is a process with its own copy "
            "of the dataset): read each batch's items concurrently inside the dataset (a thread "
            "pool over the indices) or in one batched read"
        )
    changes = loader_changes(loader, workers, cuda)
    if changes:
        lines.append(rebuilt_loader_call(loader, changes))
    if "num_workers" in changes:
        left = every - compute
        lines.append(
            f"# {waits}: a waiting worker holds no core, so {workers} workers overlap their "
            f"waits on {loader.cpus} CPUs, a batch about every {every:.1f} ms against "
            f"{compute:.1f} ms of compute"
            + (
                f"; the step will still wait about {left:.1f} ms: read each batch's items "
                "concurrently inside the dataset too"
                if left >= th.DATA_WAIT_MIN_MS
                else ""
            )
        )
    return "\n".join(lines)


def handoff_fix(workers: int, every: float, wait: float, cause: str) -> str:
    """Nothing to set: the workers keep up, the wait is each batch's hand-off (or the cores
    other processes held)."""
    left = (
        "each batch's hand-off from a worker process: larger batches amortise it"
        if cause == HANDOFF
        else f"{cause}: measure again where the cores are free"
    )
    return (
        f"# nothing to add to the DataLoader: its {workers} workers make a batch about every "
        f"{every:.1f} ms, as fast as the step uses them;\n# the {wait:.1f} ms the step still "
        f"waits is {left}"
    )


HANDOFF = "the hand-off between processes"


def warning_fix(loader: LoaderConfig, text: str) -> str:
    """The user's call changed as torch's warning asks (``fixes.torch_warning_fix``)."""
    return fx.torch_warning_fix(loader, text) or ""


CONFIG_SPEC = FindingSpec(
    id="dataloader-config",
    label="data loading (DataLoader settings)",
    title="the step waits {wait:.1f} ms ({share:.0%}) for each batch (num_workers={workers})",
    threshold=th.DATA_WAIT_SHARE,
    fix=config_fix,
    explanation="{why} Worker processes prepare the next batches while the model trains.",
    doc_url=DOCS,
    knobs=("num_workers",),
    aliases=("data-loading-bound",),
    codemods=("dataloader-args", "non-blocking-copies"),
    gates=(Gate("wait_ms", th.DATA_WAIT_MIN_MS),),
    variants=(
        (
            "restarts",
            Variant(
                "DataLoader workers start again every epoch: {cost_ms:.1f} ms per step "
                "({share:.0%}) in {starts} epoch start(s) over {measured} measured steps "
                "(num_workers={workers}, {method})",
                "Without persistent_workers every epoch starts its worker processes again (with "
                "spawn, each imports torch and unpickles the dataset) and the first batch waits "
                "for them.",
                restart_fix,
            ),
        ),
        (
            "fewer-workers",
            Variant(
                "the step waits {wait:.1f} ms for each batch from {workers} workers{idle}, but "
                "making a batch in the training process takes {batch_ms:.2f} ms (measured): "
                "fewer workers",
                "Workers pay off when making a batch costs more than handing one over between "
                "processes; for items that cost microseconds the hand-off and the workers' "
                "competition for the cores are the wait.",
                fewer_workers_fix,
            ),
        ),
        (
            "busy",
            Variant(
                "the step waits {wait:.1f} ms ({share:.0%}) for each batch (num_workers="
                "{workers}), {withheld:.1f} ms of it waiting for a CPU core other processes "
                "held: {net:.2f} ms is the loader's own",
                "Other processes held the CPUs: the line sampler saw the training thread "
                "runnable but without a core inside the DataLoader, and a batch made in the "
                "training process took no longer than its fastest fetch. What is left is under "
                "the finding's threshold; workers would wait for the same cores.",
                lambda net: (
                    f"# nothing to change in the DataLoader: its batches take {net:.2f} ms of "
                    "the step here;\n# the rest is the CPU other processes held: measure again "
                    "where the cores are free"
                ),
            ),
        ),
        (
            "hand-off",
            Variant(
                "the step waits {wait:.1f} ms for each batch from {workers} workers that keep "
                "up (a batch about every {every:.1f} ms against {compute:.1f} ms of compute): "
                "{cause}",
                "A worker's batch is pickled, passed to the training process and unpickled "
                "there; that hand-off is paid per batch whatever the worker count, so more "
                "workers do not shorten it (larger batches amortise it), and workers that wait "
                "for a core other processes hold are late whatever their number.",
                handoff_fix,
            ),
        ),
        (
            "pin-memory",
            Variant(
                "DataLoader without pin_memory on a CUDA run: host-to-device copies cannot overlap",
                "Copies from pageable memory are staged and synchronous; pinned batches copy "
                "asynchronously while the previous step computes.",
                fx.pin_memory_fix,
            ),
        ),
    ),
    frameworks=LOADER_FRAMEWORKS,
)

WARNING_SPEC = FindingSpec(
    id="torch-warning",
    label="a torch warning",
    title="torch warned: {text}",
    severity=SeverityPolicy(fixed="info"),
    fix=warning_fix,
    explanation="torch printed this warning while the script built its DataLoader "
    "iterator; the fix is the setting it names.",
    doc_url=DOCS,
)


def feeding_loader(run: RunRecord) -> LoaderConfig | None:
    """The loader whose batches the measured steps waited for longest (then: the most batches
    in them); the first recorded one when no usage was recorded (an older record)."""
    loaders = run.config.dataloaders
    if not loaders:
        return None

    def key(dl: LoaderConfig) -> tuple[float, float]:
        use = dl.usage
        return float(use.get("measured_wait_s") or 0.0), float(use.get("measured_batches") or 0.0)

    best = max(loaders, key=key)
    return best if key(best) > (0.0, 0.0) else loaders[0]


def _wait_ms(run: RunRecord, dl: LoaderConfig) -> float:
    use = dl.usage
    measured = run.steps.measured_steps
    if "measured_wait_s" in use and measured:
        return float(use["measured_wait_s"]) * 1e3 / measured
    return run.steps.mean_data_wait_ms


FETCH_CALL = "DataLoaderIter.__next__"
"""How the line table names a loader's batch fetch (``torch:utils|_BaseDataLoaderIter.__next__``)."""


def fetch_core_wait(run: RunRecord) -> float:
    """Share of the sampled time inside DataLoader ``__next__`` that the training thread was
    runnable but waited for a core (the line table's ``CPU contention``, its scheduler's
    run-queue wait): each row's fetch time times that row's contention share of its self time.
    0 where nothing was sampled in a fetch."""
    sampled = withheld = 0.0
    for row in run.lines.rows:
        fetch = sum(ms for call, ms in row.calls if call.endswith(FETCH_CALL))
        if fetch <= 0 or row.self_ms <= 0:
            continue
        sampled += fetch
        withheld += fetch * min(1.0, row.under.get("CPU contention", 0.0) / row.self_ms)
    return withheld / sampled if sampled else 0.0


MIN_FETCHES = 8
"""Fetches a loader without workers must have made before its fastest says what a batch costs."""


def fastest_fetch_ms(run: RunRecord, dl: LoaderConfig) -> float | None:
    """The fastest batch of a loader without workers over the run's steps after the first (ms),
    on a machine whose cores other processes held (``cpu_rules.contention``): each of its
    fetches makes a whole batch in the training process, so one that got the cores took what a
    batch costs (a healthy control's tensor index: 0.4 ms in 3 of 24 steps, 13-76 ms in the
    others at load 15). None with workers (a prefetched batch is fast by nature), with fewer
    than ``MIN_FETCHES`` steps, or on free cores."""
    waits = [w for w in list(run.steps.data_wait_ms)[1:] if w > 0]
    if dl.num_workers or len(waits) < MIN_FETCHES or contention(run.cpu) is None:
        return None
    return min(waits)


def withheld_wait(run: RunRecord) -> tuple[float, float] | None:
    """(the feeding loader's wait, the part of it the CPU withheld; ms per step) when the wait
    passes the finding's threshold and gate but the loader's own part does not: a wait that is
    the machine's, not the loader's. The loader's own part is the wait net of the training
    thread's core wait inside the fetch (``fetch_core_wait``), and for a loader without workers
    on a busy machine at most its fastest fetch (``fastest_fetch_ms``: a parallel operator's
    threads can wait for a core while the training thread is counted as running). None
    otherwise (no loader, nothing withheld, a wait the loader causes). Read by
    ``capture/fit.py`` too, after the trace's finding of the same problem is merged in."""
    dl, step = feeding_loader(run), run.step_ms
    if dl is None or not step:
        return None
    wait = _wait_ms(run, dl)
    own = wait * (1.0 - fetch_core_wait(run))
    fastest = fastest_fetch_ms(run, dl)
    if fastest is not None:
        own = min(own, fastest)
    if own >= wait or below_gates(wait, step):
        return None
    # the step too, net of its wait for a core: the share the loader would have on free cores
    lines = run.lines
    contended = lines.categories.get("CPU contention", 0.0)
    net_step = step * (1.0 - contended / lines.ms_per_step) if lines.ms_per_step else step
    if below_gates(own, net_step if net_step > 0 else step):
        return wait, wait - own
    return None


def below_gates(wait_ms: float, step_ms: float) -> bool:
    """A wait under ``DATA_WAIT_SHARE`` of the step or under ``DATA_WAIT_MIN_MS``."""
    return wait_ms / step_ms < th.DATA_WAIT_SHARE or wait_ms < th.DATA_WAIT_MIN_MS


def measured_item_ms(dl: LoaderConfig, wait_ms: float) -> tuple[float | None, str]:
    """One item's cost (ms) and how it was measured: timed in the training process, from the
    workers' CPU time per item in the window, or (no workers) the wait per batch."""
    use = dl.usage
    main = use.get("main_process_batch") or {}
    if main.get("item_ms") is not None:
        return float(main["item_ms"]), "timed in the training process"
    batches, cpu = float(use.get("window_batches") or 0), use.get("window_worker_cpu_s")
    if dl.num_workers and cpu is not None and batches and dl.batch_size:
        return float(cpu) * 1e3 / (batches * dl.batch_size), "workers' CPU time per item"
    if not dl.num_workers and dl.batch_size:
        return wait_ms / dl.batch_size, "the wait per batch, no workers"
    return None, "not measured"


def workers_busy(dl: LoaderConfig) -> float | None:
    """Share of the window the workers ran or waited for a core (1: always wanted the CPU)."""
    use = dl.usage
    n, wall = use.get("window_workers"), use.get("window_s")
    if not n or not wall or use.get("window_worker_cpu_s") is None:
        return None
    wanted = float(use["window_worker_cpu_s"]) + float(
        use.get("window_worker_runqueue_wait_s") or 0
    )
    return min(1.0, wanted / (float(wall) * int(n)))


def measure_config(run: RunRecord) -> Measured | None:
    """The feeding loader's wait as a share of the step (``value``; ``DATA_WAIT_SHARE`` and
    ``DATA_WAIT_MIN_MS`` fire it) and the change that removes it; saving (ms/step): the wait
    that change removes. Below them, a CUDA run's loader without pin_memory (info, no saving).
    Where its call sets a measured worker count, torch's too-many-workers warning about the same
    loader is in its evidence (``torch_warning``), not a finding of its own (``measure_warnings``)."""
    measured = _measure_config(run)
    dl = feeding_loader(run)
    if dl is not None and measured is not None and sets_workers(measured, dl):
        warned = [text for text in dl.torch_warnings if TOO_MANY_WORKERS in text]
        if warned:
            measured.evidence["torch_warning"] = warned[0]
    return measured


TOO_MANY_WORKERS = "worker processes in total"
"""How torch's warning about more DataLoader workers than the CPUs reads."""


def sets_workers(measured: Measured, dl: LoaderConfig) -> bool:
    """``dataloader-config``'s call for ``dl`` sets its measured worker count: none (a batch
    cheaper than a hand-off) or more than now. At or under the present count the call keeps it."""
    count = measured.evidence.get("suggested_num_workers")
    return isinstance(count, int) and (count == 0 or count > dl.num_workers)


def _measure_config(run: RunRecord) -> Measured | None:
    step = run.step_ms
    dl = feeding_loader(run)
    if dl is None or not step:
        return None
    wait = _wait_ms(run, dl)
    cuda = run.gpu is not None
    if below_gates(wait, step):
        # the spec's own threshold and gate: below them only the pin_memory wording is left
        if not (cuda and not dl.pin_memory):
            return None
        return Measured(
            value=wait / step,
            evidence={"dataloader": dl.raw},
            fix={"loader": dl},
            variant="pin-memory",
            judged="a CUDA run's DataLoader without pin_memory",
        )
    gates = {"wait_ms": wait}
    restarts = _restarts(run, dl, wait, step)
    if restarts is not None:
        return restarts
    held = withheld_wait(run)
    if held is not None:
        return _withheld(run, dl, *held, step)
    item_ms, how = measured_item_ms(dl, wait)
    use = dl.usage
    main = use.get("main_process_batch") or {}
    busy = workers_busy(dl)
    evidence: dict[str, Any] = {
        "data_wait_ms_per_step": wait,
        "dataloader": dl.raw,
        "item_ms_measured": item_ms,
        "item_cost_measured_by": how,
        "workers_busy_share": busy,
        "item_ms_estimate": item_cost_ms(dl, step, wait),
    }
    batch_ms = main.get("batch_ms")
    if (
        dl.num_workers
        and batch_ms is not None
        and batch_ms < wait
        and (busy or 0.0) < th.WORKERS_IDLE
        and not items_wait(dl)  # workers asleep on their items' waits are not idle
    ):
        return _fewer_workers(dl, wait, step, float(batch_ms), busy, evidence)
    on_cpu, waits = main.get("on_cpu_share"), items_wait(dl)
    compute = fastest_compute_ms(run, step, wait)
    batch = float(batch_ms) if batch_ms else None
    if batch is None and item_ms and dl.batch_size:
        batch = item_ms * dl.batch_size
    evidence.update(fastest_compute_ms=compute, on_cpu_share=on_cpu)
    handoff = _handoff(dl, run.cpu, wait, step, batch_ms, compute, waits, evidence)
    if handoff is not None:
        return handoff
    # on cores other processes hold no step shows the free machine's compute (slow_dataloader.py
    # at load 20: 71 ms in its fastest step, 1.1 ms minutes later): workers that wait cost no
    # core, so the count is sized for the batch's wait alone, the cap
    contended = waits and contention(run.cpu) is not None
    workers = _suggested_workers(dl, None if contended else batch, compute, waits)
    if contended:
        evidence["workers_sized_for"] = "the batch's waits: no step here got free cores"
    evidence["suggested_num_workers"] = workers
    if dl.num_workers == 0:
        why = "num_workers=0 loads every batch in the training process, between steps."
    elif dl.num_workers >= workers and waits:
        why = (
            f"{dl.num_workers} workers cannot keep up with items that wait: more processes "
            "cost memory and hand-offs; overlap the waits inside each worker."
        )
    elif dl.num_workers >= workers:
        why = (
            f"{dl.num_workers} workers, as many as the CPUs, cannot keep up: each item costs "
            "too much."
        )
    else:
        why = (
            f"{dl.num_workers} workers cannot keep up: add workers (up to the CPU count) or "
            "make __getitem__ cheaper (decode/augment on the GPU, pre-process once)."
        )
    return Measured(
        value=wait / step,
        saving_ms=wait,
        title={"wait": wait, "share": wait / step, "workers": dl.num_workers},
        evidence=evidence,
        fix={
            "loader": dl,
            "workers": workers,
            "cuda": cuda,
            # the compute of the fastest step: what the workers must keep up with on free cores
            "step_ms": compute + wait,
            "wait_ms": wait,
            "item_ms": item_ms,
            "on_cpu": on_cpu,
            "batch_ms": batch,
        },
        gates=gates,
        explain={"why": why},
    )


def fastest_compute_ms(run: RunRecord, step: float, wait: float) -> float:
    """The step's own work (ms: a step less its wait for a batch) in the fastest step after the
    first, at most the mean step less the mean wait: on cores other processes hold the mean is
    theirs (slow_dataloader.py at load 10: 110 ms of compute a step on average, 1.5 ms in its
    fastest), and the workers must keep up with the step where the cores are free."""
    steps = run.steps
    own = [s - w for s, w in zip(steps.step_ms[1:], steps.data_wait_ms[1:], strict=False)]
    return max(0.1, min([step - wait, *(c for c in own if c > 0)]))


def _handoff(
    dl: LoaderConfig,
    cpu: Any,
    wait: float,
    step: float,
    batch_ms: float | None,
    compute: float,
    waits: bool,
    evidence: dict[str, Any],
) -> Measured | None:
    """Workers that make batches as fast as the fastest step uses them (each on a core of its
    own, or for items that wait, all at once): the wait left is each batch's hand-off, or where
    the workers waited for cores other processes held longer than they ran, that wait; no
    setting of the loader removes either (info, no saving)."""
    if not dl.num_workers or not batch_ms:
        return None
    parallel = dl.num_workers if waits else min(dl.num_workers, max(1, dl.cpus - 1))
    every = batch_ms / parallel
    if every > compute:
        return None
    use, cause = dl.usage, HANDOFF
    ran, queued = use.get("window_worker_cpu_s"), use.get("window_worker_runqueue_wait_s")
    if ran is not None and queued is not None and queued > ran and contention(cpu) is not None:
        # padded_text_loader.py with 16 workers at load 16: 116 ms waiting for a core in the
        # window against 7 ms running; its typical fetch took 0.1 ms, the mean 50 ms
        cause = (
            f"the workers' waits for cores other processes held ({queued * 1e3:.0f} ms in the "
            f"window, against {ran * 1e3:.0f} ms running)"
        )
    return Measured(
        value=wait / step,
        title={
            "wait": wait,
            "workers": dl.num_workers,
            "every": every,
            "compute": compute,
            "cause": cause,
        },
        evidence={**evidence, "batch_every_ms": every},
        fix={"workers": dl.num_workers, "every": every, "wait": wait, "cause": cause},
        gates={"wait_ms": wait},
        variant="hand-off",
        judged="workers that keep up: the wait is the hand-off",
        most="info",
    )


def _withheld(
    run: RunRecord, dl: LoaderConfig, wait: float, withheld: float, step: float
) -> Measured:
    """A wait that is mostly the CPU other processes held (info, no saving)."""
    net = wait - withheld
    return Measured(
        value=wait / step,
        title={
            "wait": wait,
            "share": wait / step,
            "workers": dl.num_workers,
            "withheld": withheld,
            "net": net,
        },
        evidence={
            "data_wait_ms_per_step": wait,
            "core_wait_ms_per_step": withheld,
            "loader_ms_per_step": net,
            "fastest_fetch_ms": fastest_fetch_ms(run, dl),
            "dataloader": dl.raw,
        },
        fix={"net": net},
        gates={"wait_ms": wait},
        variant="busy",
        judged="a wait that is the CPU other processes held",
        most="info",
    )


def _suggested_workers(
    dl: LoaderConfig, batch_ms: float | None, compute: float, waits: bool
) -> int:
    """Workers enough to make a batch in half the fastest step's compute each (room for
    workers sharing cores), at least one more than now; at most the rank's CPUs (and 8), or for
    items that wait (a waiting worker holds no core) ``WAITING_WORKERS_MAX``."""
    cap = max(1, min(8, dl.cpus))
    if waits:
        cap = max(cap, int(th.WAITING_WORKERS_MAX))
    if batch_ms is None:
        return cap
    needed = math.ceil(2 * batch_ms / compute)
    return max(1, min(cap, max(needed, dl.num_workers + 1)))


def _restarts(run: RunRecord, dl: LoaderConfig, wait: float, step: float) -> Measured | None:
    """Workers started again for every epoch: their start-up is the wait."""
    use = dl.usage
    measured = run.steps.measured_steps
    if not dl.num_workers or dl.persistent_workers or not measured:
        return None
    starts = int(use.get("measured_first_batches") or 0)
    cost_ms = float(use.get("measured_iter_s") or 0) + float(use.get("measured_first_wait_s") or 0)
    cost_ms = cost_ms * 1e3 / measured
    if starts < 1 or cost_ms < th.RESTART_SHARE_OF_WAIT * wait:
        return None
    # a batch cheaper to make here than a hand-off: no workers, nothing to keep or restart
    batch_ms = (use.get("main_process_batch") or {}).get("batch_ms")
    cheap = float(batch_ms) if batch_ms is not None and batch_ms < th.DATA_WAIT_MIN_MS else None
    title = {
        "cost_ms": cost_ms,
        "share": cost_ms / step,
        "starts": starts,
        "measured": measured,
        "workers": dl.num_workers,
        "method": dl.multiprocessing_context or "the default start method",
    }
    evidence: dict[str, Any] = {
        "data_wait_ms_per_step": wait,
        "restart_ms_per_step": cost_ms,
        "dataloader": dl.raw,
    }
    if cheap is not None:
        evidence.update(main_process_batch_ms=cheap, suggested_num_workers=0)
    return Measured(
        value=wait / step,
        saving_ms=min(cost_ms, wait) if cheap is None else wait - cheap,
        title=title,
        evidence=evidence,
        fix={"loader": dl, "batch_ms": cheap},
        gates={"wait_ms": wait},
        variant="restarts",
    )


def _fewer_workers(
    dl: LoaderConfig,
    wait: float,
    step: float,
    batch_ms: float,
    busy: float | None,
    evidence: dict[str, Any],
) -> Measured:
    return Measured(
        value=wait / step,
        saving_ms=wait - batch_ms,
        title={
            "wait": wait,
            "workers": dl.num_workers,
            "idle": "" if busy is None else f", busy {busy:.0%} of the time",
            "batch_ms": batch_ms,
        },
        evidence={**evidence, "main_process_batch_ms": batch_ms, "suggested_num_workers": 0},
        fix={"loader": dl, "batch_ms": batch_ms},
        gates={"wait_ms": wait},
        variant="fewer-workers",
    )


def measure_warnings(run: RunRecord) -> tuple[Measured, ...]:
    """torch's own DataLoader warnings that name a setting to change (too many workers for the
    CPUs, pin_memory without an accelerator), a finding each; saving not measured (0). Not the
    worker count's for a loader whose items were measured to wait (``items_wait``): torch counts
    cores, and workers beyond them overlap those waits (``dataloader-config`` set them); nor for
    the loader whose call ``dataloader-config`` gives a measured worker count (``sets_workers``):
    one loader, one count (torch's guess from the cores would contradict the measured one), the
    warning in that finding's evidence."""
    config, feeding = measure_config(run), feeding_loader(run)
    measured = feeding if config and feeding and sets_workers(config, feeding) else None
    return tuple(
        Measured(
            value=1.0,
            title={"text": _first_sentence(text)},
            evidence={"warning": text, "dataloader": dl.raw},
            fix={"loader": dl, "text": text},
        )
        for dl in run.config.dataloaders
        for text in dl.torch_warnings
        if fx.torch_warning_fix(dl, text) is not None
        and not (TOO_MANY_WORKERS in text and (items_wait(dl) or dl is measured))
    )


def items_wait(dl: LoaderConfig) -> bool:
    """A batch made in the training process ran on a CPU under ``ITEMS_WAIT_SHARE`` of its time
    (``capture/loader_probe``): its items wait (I/O, a sleep), they do not compute."""
    main = dl.usage.get("main_process_batch") or {}
    share, batch_ms = main.get("on_cpu_share"), main.get("batch_ms")
    # a batch cheaper than a hand-off is no wait to overlap, whatever its items do
    cheap = batch_ms is None or batch_ms < th.DATA_WAIT_MIN_MS
    return share is not None and share < th.ITEMS_WAIT_SHARE and not cheap


def _first_sentence(text: str) -> str:
    """The warning's first two sentences on one line."""
    line = " ".join(text.split())
    cut = line.find(". ", line.find(". ") + 2)
    line = line if cut < 0 else line[: cut + 1]
    return line if len(line) <= 200 else line[:197] + "..."


RULES = (RunRule(CONFIG_SPEC, measure_config), RunRule(WARNING_SPEC, measure_warnings))
