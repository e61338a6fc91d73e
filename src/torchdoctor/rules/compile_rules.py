"""Run-level rules about torch.compile: recompiles, the recompile limit, graph breaks, and
compile time that the run does not earn back."""

from __future__ import annotations

import math

from torchdoctor import ab
from torchdoctor.record.run import RunRecord
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.one_off import job_steps, one_off
from torchdoctor.rules.registry import spec
from torchdoctor.rules.run_common import make
from torchdoctor.rules.user_fixes import reason_line, recompile_user_fix


def _recompile_saving_ms(run: RunRecord) -> float:
    c, measured = run.compile, run.steps.measured_steps
    if c.recompiles_in_window and measured:
        return c.recompile_s_in_window * 1e3 / measured
    if run.completed and run.steps.count:
        return c.recompile_s * 1e3 / run.steps.count  # the whole run: exact
    return 0.0  # only during warm-up in a run we stopped: a one-time cost, not a per-step one


def recompiles(run: RunRecord) -> list[Finding]:
    """Recompiles; saving (ms/step): recompile time in the measured steps per measured step."""
    c = run.compile
    if c.recompiles == 0:
        return []
    late = c.recompiles_in_window
    events = c.recompile_events
    reasons = list(dict.fromkeys(e["reason"] for e in events if e.get("reason")))
    sites = [f"{e['site']} ({e['function']})" for e in events if not e["site"].startswith("?")]
    s = spec("recompiles")
    title = s.format_title(
        n=c.recompiles,
        seconds=c.recompile_s,
        late=late,
        first=reason_line(reasons[0]) if reasons else "see evidence",
    )
    evidence = {
        "recompiles": c.recompiles,
        "recompile_s": c.recompile_s,
        "recompiles_after_warmup": late,
        "recompile_s_after_warmup": c.recompile_s_in_window,
        "reasons": reasons[:8],
    }
    where = list(dict.fromkeys(sites))[:8]
    if not (late and run.steps.measured_steps):
        # only during warm-up: a cost of the job, spread over the run's steps when it ended by
        # itself (exact), else none per step
        return [
            one_off(
                run,
                s.id,
                title,
                c.recompile_s * 1e3,
                evidence,
                s.fix(reasons, events),
                saved_ms=None if run.completed and run.steps.count else 0.0,
                where=where,
                severity="info" if not run.completed else None,
            )
        ]
    return [
        make(
            run,
            s.id,
            title,
            _recompile_saving_ms(run),
            evidence,
            s.fix(reasons, events),
            where=where,
            floor="warning" if late else "info",
        )
    ]


def _limit_fix(run: RunRecord) -> str:
    named = recompile_user_fix(run.compile.recompile_events, "")
    if not named:
        return fx.RECOMPILE_LIMIT
    return (
        named
        + "\n# to fail loudly instead: torch._dynamo.config.fail_on_recompile_limit_hit = True"
    )


def recompile_limit(run: RunRecord) -> list[Finding]:
    """The recompile limit was hit (the function now runs eager); saving unknown (0 ms)."""
    hits = run.compile.recompile_limit_hits
    if not hits:
        return []
    h = hits[0]
    return [
        make(
            run,
            "recompile-limit-hit",
            spec("recompile-limit-hit").format_title(limit=h["limit"], function=h["function"]),
            0.0,
            {"hits": hits[:8]},
            _limit_fix(run),
            where=[h["site"]] if h.get("site") else [],
        )
    ]


def graph_breaks(run: RunRecord) -> list[Finding]:
    """Graph breaks with user lines; saving (ms/step): GRAPH_BREAK_SHARE of the step each."""
    breaks = run.compile.graph_breaks
    if not breaks:
        return []
    sites = list(dict.fromkeys(b["site"] for b in breaks))
    share = min(th.GRAPH_BREAK_MAX_SHARE, th.GRAPH_BREAK_SHARE * len(sites))
    top = breaks[0]
    s = spec("graph-breaks")
    return [
        make(
            run,
            s.id,
            s.format_title(n=len(sites), reason=top["reason"]),
            share * (run.step_ms or 0.0),
            {"locations": len(sites), "breaks": breaks[:10]},
            s.fix(top["site"]),
            where=sites[:10],
        )
    ]


def _compile_fix(run: RunRecord) -> str:
    modes = {c.get("mode") for c in run.compile.compile_calls}
    tuned = sorted(m for m in modes if isinstance(m, str) and m.startswith("max-autotune"))
    if not tuned:
        return fx.COMPILE_NOT_REPAID
    return (
        f"model = torch.compile(model)  # not mode={tuned[0]!r}: its tuning is a one-time cost "
        "a short job never repays\n" + fx.COMPILE_NOT_REPAID
    )


def compile_not_repaid(run: RunRecord) -> list[Finding]:
    """Compile time above the whole job's step time (the run's own when it ended by itself,
    else the length the script names): a cost of the job (``rules/one_off.py``), printed with
    its break-even (compile time over the step time: even a 2x speed-up saves at most one step
    time per step); ranked by what it costs beyond the job's steps, spread over them."""
    compile_ms = run.compile.compile_s * 1e3
    step_ms, count = run.step_ms, run.steps.count
    if not (compile_ms and step_ms and count):
        return []
    s = spec("compile-not-repaid")
    if run.completed:
        run_ms, steps, known = sum(run.steps.step_ms) - compile_ms, count, f"{count} steps run"
    else:
        job = job_steps(run)
        if job is None:
            return _break_even(run, compile_ms, step_ms)
        steps, known = job
        run_ms = steps * step_ms
    # Even a 2x speed-up saves at most one step time per step: compile time above the total
    # step time can never be repaid by this job.
    if compile_ms <= max(run_ms, 0.0):
        return []
    return [
        one_off(
            run,
            s.id,
            s.format_title(seconds=compile_ms / 1e3, count=steps, known=known),
            compile_ms,
            {
                "compile_s": compile_ms / 1e3,
                "steps": steps,
                "job_length": known,
                "step_time_total_s": run_ms / 1e3,
                "break_even_steps": round(_repaid_after(compile_ms, step_ms), 1),
            },
            _compile_fix(run),
            saved_ms=compile_ms - steps * step_ms,  # as before: per step, compile less a step
            break_even_steps=_repaid_after(compile_ms, step_ms),
        )
    ]


def _repaid_after(compile_ms: float, step_ms: float) -> float:
    """The shortest job that could repay the compile: its break-even if compiling saved a whole
    step per step (no speed-up saves more), compile time over the step time."""
    return ab.break_even_steps(compile_ms, step_ms) or math.inf


def _break_even(run: RunRecord, compile_ms: float, step_ms: float) -> list[Finding]:
    """A stopped run that does not say its length: the job length compile needs (info, no
    saving: whether it is repaid depends on the length nobody said)."""
    steps = _repaid_after(compile_ms, step_ms)
    if steps < th.COMPILE_BREAK_EVEN_STEPS:
        return []
    title = (
        f"torch.compile took {compile_ms / 1e3:.1f} s, as long as {steps:.0f} steps of "
        f"{step_ms:.1f} ms: a job shorter than that never repays it"
    )
    return [
        one_off(
            run,
            "compile-not-repaid",
            title,
            compile_ms,
            {"compile_s": compile_ms / 1e3, "break_even_steps": steps},
            _compile_fix(run),
            saved_ms=0.0,
            break_even_steps=steps,
            severity="info",
        )
    ]
