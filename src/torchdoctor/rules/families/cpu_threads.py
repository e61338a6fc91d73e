"""More runnable threads than free cores (``torchdoctor check``): intra-op threads and busy
DataLoader workers beyond the cores other processes leave, measured by the thread probe (the
same work with the script's thread count and with fewer, interleaved, after the steps); or the
main thread itself waiting for a core on a machine other work keeps busy.

The counters are ``run.json``'s ``cpu`` record (``rules/cpu_rules.py`` reads them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, Measured, RunRule, Variant

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord
    from torchdoctor.rules.cpu_rules import CpuDemand


def starved_fix(other: float, cores: int) -> str:
    """Nothing in the script: measure where the cores are free."""
    return (
        f"# other processes used {other:.1f} of {cores} cores: measure again where "
        "the cores are free,\n# or give this job cores of its own (a cpuset, a less busy "
        "machine); nothing in the script causes this"
    )


SPEC = FindingSpec(
    id="cpu-oversubscribed",
    label="more threads than free cores",
    title="{threads} intra-op threads{workers} on {free:.1f} free of {cores} cores: the "
    "same work ran {ratio:.1f}x slower than with {k} thread(s)",
    threshold=th.OVERSUBSCRIBED_RATIO,
    fix=fx.cpu_threads_fix,
    explanation="Each parallel operator splits its work over the intra-op threads and waits "
    "for the last one; a thread without a core stalls all of them, so threads beyond the "
    "free cores (other jobs, DataLoader workers) make every operator slower, not faster.",
    doc_url=f"{fx.DOCS}/notes/cpu_threading_torchscript_inference.html",
    caveat=True,
    variants=(
        (
            "starved",
            Variant(
                "the main thread waited for a CPU core {share:.0%} of the measured time: other "
                "processes kept {other:.1f} of {cores} cores busy (step times here are "
                "inflated)",
                "A thread that is runnable but has no core waits on the run queue; the kernel "
                "counts that time per thread. It was counted here, on the step's own thread.",
                starved_fix,
            ),
        ),
    ),
)


def measure(run: RunRecord) -> Measured | None:
    """The thread probe's slow-down of the script's thread count over the suggested one, when
    the threads outnumber the free cores; saving (ms/step): the operator time that slow-down
    accounts for. Otherwise the main thread's wait for a core, at ``STARVED_SHARE`` of the
    measured time or more: the ``starved`` wording, saving 0, info (never a clean bill on
    numbers taken on a busy machine)."""
    from torchdoctor.rules.cpu_rules import cpu_demand, implausible_probe

    cpu = run.cpu
    d = cpu_demand(cpu)
    step = run.step_ms
    if d is None or not step:
        return None
    probe = cpu.get("thread_probe") or {}
    ratio = float(probe.get("ratio_median") or 0.0)
    failed = probe.get("failed") or implausible_probe(probe)
    cpu_ms = _cpu_op_ms(run, step)
    if d.oversubscribed and ratio >= th.OVERSUBSCRIBED_RATIO and not failed and cpu_ms:
        k = int(probe.get("threads_b") or d.suggested_threads)
        saving = min(cpu_ms, step) * (1.0 - 1.0 / ratio)  # bounded by the CPU's operator time
        # a round faster with the script's threads: the rounds disagree (on a busy machine
        # the load moves between them), so the median alone is said for the record
        low = probe.get("ratio_low")
        split = isinstance(low, (int, float)) and low <= 1.0
        return Measured(
            value=ratio,
            saving_ms=saving,
            title={
                "threads": d.threads,
                "workers": f" + {d.busy_workers:.1f} busy workers" if d.busy_workers >= 0.1 else "",
                "free": d.free_cores,
                "cores": d.cores,
                "ratio": ratio,
                "k": k,
            },
            evidence={**_evidence(cpu, d), "thread_probe": probe, "rounds_disagree": split},
            fix={
                "threads": k,
                "current": d.threads,
                "workers": int(cpu.get("workers") or 0),
                "free_cores": d.free_cores,
            },
            most="info" if split else None,
        )
    wait = cpu.get("main_thread_runqueue_wait_s")
    share = float(wait) / float(cpu["wall_s"]) if wait is not None else 0.0
    if share < th.STARVED_SHARE:
        return None
    return Measured(
        value=ratio,
        title={"share": share, "other": d.other_cores, "cores": d.cores},
        evidence={**_evidence(cpu, d), "main_thread_wait_share": round(share, 3)},
        fix={"other": d.other_cores, "cores": d.cores},
        variant="starved",
        judged="the main thread starved of cores",
        most="info",
    )


def _cpu_op_ms(run: RunRecord, step: float) -> float | None:
    """Operator time per step the intra-op threads can speed up (ms), None when too little to
    matter: on a CPU run the operators' time; on a GPU run only the operators that computed on
    the CPU, and only when they hold ``THREADS_CPU_OP_SHARE`` of the step."""
    ops = run.op_summary
    if run.gpu is None:
        return ops.op_time_ms_per_step or step
    cpu_ms = ops.cpu_op_time_ms_per_step
    if cpu_ms is None or cpu_ms < th.THREADS_CPU_OP_SHARE * step:
        return None  # the step is GPU kernels: the CPU's threads do not set its time
    return cpu_ms


def _evidence(cpu: dict[str, Any], d: CpuDemand) -> dict[str, Any]:
    return {
        "cpu": cpu,
        "free_cores": round(d.free_cores, 2),
        "runnable_threads": round(d.demand, 2),
        "process_cpu_per_wall": round(float(cpu.get("process_cpu_s") or 0.0) / cpu["wall_s"], 3),
    }


RULES = (RunRule(SPEC, measure),)
