"""torch.compile in a check run (``torchdoctor check``): recompiles, the recompile limit, graph
breaks, and compile time the job does not earn back.

Read from the run's ``compile`` record (``capture/compile_watch.py``: dynamo's own counters and
guard failures, with the user's lines). A recompile only in warm-up and a compile the job never
repays are costs of the job (``Measured.once``), not of every step.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from torchdoctor.record.typed import plain
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.graph_break_fixes import graph_break_fix
from torchdoctor.rules.spec import (
    FindingSpec,
    Measured,
    Once,
    RunRule,
    Severity,
    SeverityPolicy,
    Variant,
)
from torchdoctor.rules.user_fixes import reason_line, recompile_user_fix

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord

DOCS = f"{fx.DOCS}/torch.compiler_troubleshooting.html"


def limit_fix(
    events: list[dict[str, Any]] | None = None, calls: list[dict[str, Any]] | None = None
) -> str:
    """``mark_dynamic`` on what the recompiles' guards name (before the compiled model's call,
    ``calls``, where found), with how to fail loudly; the generic advice when they name
    nothing."""
    named = recompile_user_fix(events or [], "", calls or ())
    if not named:
        return fx.RECOMPILE_LIMIT
    return (
        named
        + "\n# to fail loudly instead: torch._dynamo.config.fail_on_recompile_limit_hit = True"
    )


def recompiles_fix(
    reasons: list[str],
    events: list[dict[str, Any]] | None = None,
    calls: list[dict[str, Any]] | None = None,
) -> str:
    """mark_dynamic on the tensor and dimension the guards name, before the compiled model's
    call (``calls``) where found; otherwise keep the guarded values constant."""
    return recompile_user_fix(events or [], fx.recompile_fix(reasons), calls or ())


def compile_fix(modes: tuple[Any, ...] = ()) -> str:
    """Compile without max-autotune (when a call asked for it), or run eager for short jobs."""
    tuned = sorted(m for m in modes if isinstance(m, str) and m.startswith("max-autotune"))
    if not tuned:
        return fx.COMPILE_NOT_REPAID
    return (
        f"model = torch.compile(model)  # not mode={tuned[0]!r}: its tuning is a one-time cost "
        "a short job never repays\n" + fx.COMPILE_NOT_REPAID
    )


RECOMPILES_SPEC = FindingSpec(
    id="recompiles",
    label="recompiles",
    title="{n} recompiles ({seconds:.2f} s), {late} after warm-up: {first}",
    probe="unscaled",
    fix=recompiles_fix,
    explanation="Each recompile stops the step to trace and compile again; a guard on a size "
    "that changes every step means the compiled code is rarely reused.",
    doc_url=DOCS,
    codemods=("mark-dynamic",),
    frameworks=(
        (
            "transformers",
            lambda f: (
                "TrainingArguments(..., torch_compile=True)\n"
                "# pad to a fixed length so shapes stay the same: tokenizer(..., padding='max_length')"
            ),
        ),
    ),
)

LIMIT_SPEC = FindingSpec(
    id="recompile-limit-hit",
    label="the recompile limit",
    title="recompile limit ({limit}) hit in {function}: it now runs eager, silently",
    probe="unscaled",
    severity=SeverityPolicy(fixed="warning", risk=True),
    fix=limit_fix,
    explanation="After recompile_limit recompiles of one function dynamo stops compiling it "
    "and falls back to eager for the rest of the run; the speed-up is gone without an error.",
    doc_url=DOCS,
    codemods=("mark-dynamic",),
)

BREAKS_SPEC = FindingSpec(
    id="graph-breaks",
    label="graph breaks",
    title="{n} graph break location(s) in compiled code; first: {reason}",
    severity=SeverityPolicy(floor="warning"),
    fix=graph_break_fix,
    explanation="A graph break ends one compiled graph and starts another: the code between "
    "runs eagerly, guards are checked again, and nothing fuses across the break.",
    doc_url=DOCS,
)

NOT_REPAID_SPEC = FindingSpec(
    id="compile-not-repaid",
    label="compile time not repaid",
    title="torch.compile took {seconds:.1f} s for a job of {count} steps ({known}): more "
    "than all its steps take",
    probe="unscaled",
    fix=compile_fix,
    explanation="Compilation is paid once per process; a run shorter than its compile time "
    "never earns it back.",
    doc_url=f"{fx.DOCS}/generated/torch.compile.html",
    knobs=("compile",),
    variants=(
        (
            "break-even",
            Variant(
                "torch.compile took {seconds:.1f} s, as long as {steps:.0f} steps of "
                "{step_ms:.1f} ms: a job shorter than that never repays it"
            ),
        ),
    ),
)


def guarded_calls(run: RunRecord) -> list[dict[str, Any]]:
    """Where the script calls the compiled model with each argument a guard named
    (:mod:`torchdoctor.rules.call_sites`); [] when no recompile names an argument or the
    files cannot be read."""
    from torchdoctor.rules.call_sites import guarded_calls as find

    try:
        return find(run)
    except Exception:  # a user file the finder cannot read: the fix names no call, as before
        return []


def _recompile_saving_ms(run: RunRecord) -> float:
    c, measured = run.compile, run.steps.measured_steps
    if c.recompiles_in_window and measured:
        return c.recompile_s_in_window * 1e3 / measured
    if run.completed and run.steps.count:
        return c.recompile_s * 1e3 / run.steps.count  # the whole run: exact
    return 0.0  # only during warm-up in a run we stopped: a one-time cost, not a per-step one


def measure_recompiles(run: RunRecord) -> Measured | None:
    """Recompiles (``value``, any fires); saving (ms/step): recompile time in the measured
    steps per measured step, a warning then. Only in warm-up: a cost of the job, spread over
    the run's steps when it ended by itself (exact), else none per step (info)."""
    c = run.compile
    if c.recompiles == 0:
        return None
    late, events = c.recompiles_in_window, c.recompile_events
    reasons = list(dict.fromkeys(e.reason for e in events if e.reason))
    sites = [f"{e.site} ({e.function})" for e in events if not e.site.startswith("?")]
    title = {
        "n": c.recompiles,
        "seconds": c.recompile_s,
        "late": late,
        "first": reason_line(reasons[0]) if reasons else "see evidence",
    }
    evidence = {
        "recompiles": c.recompiles,
        "recompile_s": c.recompile_s,
        "recompiles_after_warmup": late,
        "recompile_s_after_warmup": c.recompile_s_in_window,
        "reasons": reasons[:8],
    }
    where = tuple(list(dict.fromkeys(sites))[:8])
    fix = {"reasons": reasons, "events": plain(events), "calls": guarded_calls(run)}
    if late and run.steps.measured_steps:
        saving = _recompile_saving_ms(run)
        return Measured(c.recompiles, saving, 0.0, title, evidence, fix, where, least="warning")
    ended = run.completed and run.steps.count
    once = Once(c.recompile_s * 1e3, saved_ms=None if ended else 0.0)
    most: Severity | None = "info" if not run.completed else None  # a stopped run: unknown
    return Measured(c.recompiles, 0.0, 0.0, title, evidence, fix, where, most=most, once=once)


def measure_limit(run: RunRecord) -> Measured | None:
    """The recompile limit was hit (the function now runs eager); saving unknown (0 ms)."""
    hits = run.compile.recompile_limit_hits
    if not hits:
        return None
    h = hits[0]
    events = plain(run.compile.recompile_events)
    # mark_dynamic runs before each call of the compiled function, never inside it (dynamo
    # rejects it there): the finding points at no line in the function that hit the limit;
    # its fix names the call (``guarded_calls``)
    at_call = bool(recompile_user_fix(events, ""))
    return Measured(
        value=len(hits),
        title={"limit": h.limit, "function": h.function},
        evidence={"hits": plain(hits[:8]), "site": h.site},
        fix={"events": events, "calls": guarded_calls(run)},
        where=(h.site,) if h.site and not at_call else (),
    )


def measure_breaks(run: RunRecord) -> Measured | None:
    """Graph breaks at distinct user lines (``value``, any fires); saving (ms/step):
    ``GRAPH_BREAK_SHARE`` of the step each, at most ``GRAPH_BREAK_MAX_SHARE``."""
    breaks = run.compile.graph_breaks
    if not breaks:
        return None
    sites = list(dict.fromkeys(b.site for b in breaks))
    share = min(th.GRAPH_BREAK_MAX_SHARE, th.GRAPH_BREAK_SHARE * len(sites))
    return Measured(
        value=len(sites),
        saving_ms=share * (run.step_ms or 0.0),
        title={"n": len(sites), "reason": breaks[0].reason},
        evidence={"locations": len(sites), "breaks": plain(breaks[:10])},
        fix={"breaks": plain(breaks[:10])},
        where=tuple(sites[:10]),
    )


def _repaid_after(compile_ms: float, step_ms: float) -> float:
    """The shortest job that could repay the compile: its break-even if compiling saved a whole
    step per step (no speed-up saves more), compile time over the step time."""
    from torchdoctor import ab  # statistics and fractions: imported when a run is judged

    return ab.break_even_steps(compile_ms, step_ms) or math.inf


def measure_not_repaid(run: RunRecord) -> Measured | None:
    """Compile time above the whole job's step time (the run's own when it ended by itself,
    else the length the script names): a cost of the job (``rules/one_off.py``), printed with
    its break-even (compile time over the step time: even a 2x speed-up saves at most one step
    time per step); ranked by what it costs beyond the job's steps, spread over them. A stopped
    run that names no length: the job length compile needs (the ``break-even`` wording, info,
    no saving), when that is ``COMPILE_BREAK_EVEN_STEPS`` or more."""
    from torchdoctor.rules.one_off import job_steps

    compile_ms = run.compile.compile_s * 1e3
    step_ms, count = run.step_ms, run.steps.count
    if not (compile_ms and step_ms and count):
        return None
    fix = {"modes": tuple(c.mode for c in run.compile.compile_calls)}
    repaid_after = _repaid_after(compile_ms, step_ms)
    if run.completed:
        run_ms, steps, known = sum(run.steps.step_ms) - compile_ms, count, f"{count} steps run"
    elif (job := job_steps(run)) is not None:
        (steps, known), run_ms = job, job[0] * step_ms
    elif repaid_after < th.COMPILE_BREAK_EVEN_STEPS:
        return None
    else:
        return Measured(
            value=compile_ms,
            title={"seconds": compile_ms / 1e3, "steps": repaid_after, "step_ms": step_ms},
            evidence={"compile_s": compile_ms / 1e3, "break_even_steps": repaid_after},
            fix=fix,
            most="info",
            variant="break-even",
            once=Once(compile_ms, saved_ms=0.0, break_even_steps=repaid_after),
        )
    # Even a 2x speed-up saves at most one step time per step: compile time above the total
    # step time can never be repaid by this job.
    if compile_ms <= max(run_ms, 0.0):
        return None
    return Measured(
        value=compile_ms,
        title={"seconds": compile_ms / 1e3, "count": steps, "known": known},
        evidence={
            "compile_s": compile_ms / 1e3,
            "steps": steps,
            "job_length": known,
            "step_time_total_s": run_ms / 1e3,
            "break_even_steps": round(repaid_after, 1),
        },
        fix=fix,
        # as before: per step, compile less a step
        once=Once(compile_ms, saved_ms=compile_ms - steps * step_ms, break_even_steps=repaid_after),
    )


RULES = (
    RunRule(RECOMPILES_SPEC, measure_recompiles),
    RunRule(LIMIT_SPEC, measure_limit),
    RunRule(BREAKS_SPEC, measure_breaks),
    RunRule(NOT_REPAID_SPEC, measure_not_repaid),
)
