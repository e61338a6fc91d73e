"""Run-level rules: findings from what ``torchdoctor check`` collected beside the trace.

Each rule takes the typed run record (``RunRecord``, read from ``run.json``; rules are tested on
hand-written records and never import torch) and returns findings whose savings are capped at the
step. Thresholds live in ``rules/thresholds.py``, everything else about a finding in the registry
(``rules/registry.py``); estimates are documented in docs/check.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchdoctor.record.run import RunRecord
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families import RUN_FAMILY_RULES
from torchdoctor.rules.finding import Finding, rank_findings
from torchdoctor.rules.loop_lines import top_loop_line, vectorise_fix
from torchdoctor.rules.optimizer_fixes import for_loop_optimizers, optimizer_line
from torchdoctor.rules.registry import spec
from torchdoctor.rules.run_common import family_findings, make
from torchdoctor.rules.user_fixes import compiled_next_step

RunRule = Callable[[RunRecord], list[Finding]]


def tiny_ops(run: RunRecord) -> list[Finding]:
    """CPU steps made of hundreds of tiny ops; saving (ms/step): TINY_OP_SAVING of their overhead."""
    ops, step = run.op_summary, run.step_ms
    op_ms, tiny, median_us = ops.op_time_ms_per_step, ops.tiny_op_time_ms_per_step, ops.median_op_us
    if ops.gemm_share_basis != "cpu" or not step or op_ms is None or tiny is None:
        return []
    n = ops.top_level_ops_per_step or 0.0
    # Python time between ops: the step minus op time, batch waits, compile pauses and time
    # waiting in collectives (other ranks' lateness is never Python overhead).
    measured = max(1, run.steps.measured_steps)
    paused_ms = run.steps.mean_data_wait_ms + run.compile.recompile_s_in_window * 1e3 / measured
    paused_ms += ops.collective_time_ms_per_step or 0.0
    python_ms = max(0.0, step - op_ms - paused_ms)
    # The line table, when sampled, says whose Python that is: only torch's own (module calls,
    # optimizer loops) and the frameworks' is overhead fusing removes; the user's own loops,
    # file writes, sleeps and collections are not (they have findings of their own).
    framework_ms = _framework_python_ms(run)
    if framework_ms is not None:
        python_ms = min(python_ms, framework_ms)
    threshold_us = ops.tiny_op_threshold_us
    if n < th.TINY_OPS_PER_STEP or median_us is None or threshold_us is None:
        return []
    if median_us >= threshold_us:
        return []
    compute = (ops.compute_share if ops.compute_share is not None else ops.gemm_share) or 0.0
    compute_ms = ops.compute_ms_per_step or compute * op_ms
    if max(compute, compute_ms / step) >= th.COMPUTE_BOUND_GEMM_SHARE:
        return []  # dense math holds the step: compute, not overhead (forward and backward)
    optim = for_loop_optimizers(run)
    c = run.compile
    fix = (
        compiled_next_step(
            c.compile_calls,
            len({b.site for b in c.graph_breaks}),
            run.gpu is not None,
            optim,
        )
        if c.compiled
        else spec("host-bound").fix(optim)
    )
    # A per-element Python loop at one line holding a large share of the step is where the
    # tiny operators come from: that line is the place, and no compile or fused optimizer
    # removes it (rules/loop_lines.py).
    loop = top_loop_line(run.lines)
    # Compiled, no optimizer with a faster implementation, no graph break, no GPU: the
    # operators left are the compiled graph's own calls, which nothing fuses further on a CPU
    # (no CUDA graphs). The advice left, a larger batch, spreads them over more samples but
    # keeps them in the step: nothing per step to save, so the finding is for the record
    # (info), not the severity it had before the user applied the fused optimizer.
    left = (
        loop is None
        and c.compiled
        and run.gpu is None
        and not c.graph_breaks
        and not any(map(optimizer_line, optim))
    )
    v = spec("host-bound").variant("compiled-cpu" if left else "cpu")
    assert v is not None
    title = v.title.format(n=n, median_us=median_us, ms=tiny + python_ms, compute=compute_ms / step)
    evidence = {
        **run.ops,
        "python_between_ops_ms_per_step": python_ms,
        "for_loop_optimizers": [o.to_dict() for o in optim],
    }
    saving = th.TINY_OP_SAVING * (tiny + python_ms)
    where: list[str] | None = None
    if loop is not None:
        fix, where = vectorise_fix(loop), [loop.site]
        evidence["loop_line"] = {"site": loop.site, "kind": loop.kind, "share": loop.share}
    elif left:
        evidence["overhead_ms_per_step"] = tiny + python_ms
        saving = 0.0
    return [
        make(
            run,
            "host-bound",
            title,
            saving,
            evidence,
            fix,
            v.explanation,
            where=where,
            severity="info" if left else None,
        )
    ]


def _framework_python_ms(run: RunRecord) -> float | None:
    """ms per step of Python time in torch's and installed packages' code (None unsampled)."""
    from torchdoctor.rules.account_inputs import python_ms_of_framework

    if run.lines.python_by_owner is None or not run.lines.rows:
        return None
    return python_ms_of_framework(run.lines)


RULES: tuple[RunRule, ...] = (tiny_ops,)
"""The run rules written by hand (host-bound's on a CPU run, worded by its family's spec);
the family rules (``RUN_FAMILY_RULES``) run after them."""


def run_findings(run: RunRecord | dict[str, Any]) -> list[Finding]:
    """Every run-level finding for one rank's record (typed, or the ``run.json`` dict), most
    valuable first."""
    record = run if isinstance(run, RunRecord) else RunRecord.from_dict(run)
    found: list[Finding] = []
    for rule in RULES:
        found.extend(rule(record))
    for family in RUN_FAMILY_RULES:
        found.extend(family_findings(family, record))
    return rank_findings(without_caveats(found))


def without_caveats(found: list[Finding]) -> list[Finding]:
    """A finding that only says the numbers were taken on a busy machine (a ``caveat`` entry's,
    saving 0) is kept when nothing else was found, so that a starved run never reads as a clean
    bill; beside a finding that saves time it would only push that one down the list."""
    if not any(f.saving_ms_per_step > 0 for f in found):
        return found
    return [f for f in found if not (spec(f.id).caveat and f.saving_ms_per_step == 0)]
