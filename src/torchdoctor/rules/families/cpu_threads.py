"""More runnable threads than free cores (``torchdoctor check``): intra-op threads and busy
DataLoader workers beyond the cores other processes leave, measured by the thread probe (the
same work with the script's thread count and with fewer, interleaved, after the steps); or the
main thread itself waiting for a core on a machine other work keeps busy.

The counters are ``run.json``'s ``cpu`` record (``rules/cpu_rules.py`` reads them).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.sites import relative_site
from torchdoctor.rules.spec import FindingSpec, Measured, RunRule, Variant

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord
    from torchdoctor.rules.cpu_rules import CpuDemand

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""The environment variables torch reads its intra-op thread count from when it starts."""


def threads_fix(
    threads: int,
    current: int,
    workers: int,
    free_cores: float,
    sites: list[str] | None = None,
    env_sites: list[tuple[str, str]] | None = None,
) -> str:
    """Fewer intra-op threads where the script sets its count: in place of each
    ``torch.set_num_threads`` call that set it (``sites``), else of each statement that puts
    the count in the environment before torch starts (``env_sites``: site and the statement
    with the new count), else at the top of the script (a later call of the script's own would
    undo a line placed anywhere else); and DataLoader workers that fit beside them."""
    why = f"{current} threads share {free_cores:.1f} free cores"
    if sites:
        lines = [
            f"torch.set_num_threads({threads})  # in place of the line at {relative_site(s)}: {why}"
            for s in sites
        ]
    elif env_sites:
        lines = [
            f"{code}  # in place of the line at {relative_site(s)}: {why}" for s, code in env_sites
        ]
    else:
        lines = [
            f"torch.set_num_threads({threads})  # at the top of the script: {why}",
            f"# or from the shell: OMP_NUM_THREADS={threads} python train.py",
        ]
    if workers:
        fit = max(0, int(free_cores) - threads)
        lines.append(f"# and DataLoader workers that fit beside them: num_workers={fit}")
    return "\n".join(lines)


def env_thread_sites(script: str | None, threads: int) -> list[tuple[str, str]]:
    """Where the script itself puts a thread count in the environment (``os.environ[
    "OMP_NUM_THREADS"] = "4"`` or ``os.environ.setdefault(...)`` at module level), each with
    the statement rewritten to ``threads``; [] when it does not or cannot be read."""
    try:
        path = Path(script or "")
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return []
    out = []
    for stmt in tree.body:
        new = _with_count(stmt, str(threads))
        if new is not None:
            out.append((f"{path.resolve()}:{stmt.lineno}", new))
    return out


def _with_count(stmt: ast.stmt, count: str) -> str | None:
    """``stmt`` with the thread count it puts in the environment replaced by ``count``, or None
    when it puts none there."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        t = stmt.targets[0]
        if isinstance(t, ast.Subscript) and _env_key(t.value, t.slice):
            stmt.value = ast.Constant(count)
            return ast.unparse(stmt)
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "setdefault"
        and len(call.args) == 2
        and _env_key(call.func.value, call.args[0])
    ):
        call.args[1] = ast.Constant(count)
        return ast.unparse(stmt)
    return None


def _env_key(env: ast.expr, key: ast.expr) -> bool:
    """``env[key]`` names one of ``THREAD_ENV`` in ``os.environ`` (or a bare ``environ``)."""
    named = ast.unparse(env) in ("os.environ", "environ")
    return named and isinstance(key, ast.Constant) and key.value in THREAD_ENV


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
    fix=threads_fix,
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
                **_count_sites(run, d.threads, k),
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


def _count_sites(run: RunRecord, current: int, k: int) -> dict[str, Any]:
    """Where the script set the thread count the steps ran with: its ``torch.set_num_threads``
    calls of that count (every call when none recorded it), else the environment variables
    it set itself (``env_thread_sites``)."""
    calls = [c for c in run.modes.setter_calls if c.call == "set_num_threads"]
    chosen = [c for c in calls if c.value == current] or calls
    sites = list(dict.fromkeys(c.site for c in chosen))
    if sites:
        return {"sites": sites}
    if not set(run.modes.thread_env) & set(THREAD_ENV):
        return {}
    return {"env_sites": env_thread_sites(run.script, k)}


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
