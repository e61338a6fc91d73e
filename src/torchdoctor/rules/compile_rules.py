"""Run-level rules about torch.compile: recompiles, the recompile limit, graph breaks, and
compile time that the run does not earn back."""

from __future__ import annotations

from torchdoctor.record.run import RunRecord
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.finding import Finding
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
    return [
        make(
            run,
            s.id,
            s.format_title(
                n=c.recompiles,
                seconds=c.recompile_s,
                late=late,
                first=reason_line(reasons[0]) if reasons else "see evidence",
            ),
            _recompile_saving_ms(run),
            {
                "recompiles": c.recompiles,
                "recompile_s": c.recompile_s,
                "recompiles_after_warmup": late,
                "recompile_s_after_warmup": c.recompile_s_in_window,
                "reasons": reasons[:8],
            },
            s.fix(reasons, events),
            where=list(dict.fromkeys(sites))[:8],
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


def _job_steps(run: RunRecord) -> tuple[int, str] | None:
    """The job's length in steps, and how it is known: the script's step count, or its epoch
    count times the feeding loader's batches per epoch."""
    job = run.raw.get("job") or {}
    value = job.get("value")
    if not isinstance(value, int) or value <= 0:
        return None
    if job.get("unit") == "steps":
        return value, f"{job['name']} = {value}"
    for dl in run.config.dataloaders:
        n, batch = dl.raw.get("dataset_len"), dl.batch_size
        if n and batch:
            per_epoch = -(-int(n) // int(batch))
            return value * per_epoch, f"{job['name']} = {value} epochs of {per_epoch} batches"
    return None


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
    else the length the script names); saving (ms/step): compile per step - step."""
    compile_ms = run.compile.compile_s * 1e3
    step_ms, count = run.step_ms, run.steps.count
    if not (compile_ms and step_ms and count):
        return []
    s = spec("compile-not-repaid")
    if run.completed:
        run_ms, steps, known = sum(run.steps.step_ms) - compile_ms, count, f"{count} steps run"
    else:
        job = _job_steps(run)
        if job is None:
            return _break_even(run, compile_ms, step_ms)
        steps, known = job
        run_ms = steps * step_ms
    # Even a 2x speed-up saves at most one step time per step: compile time above the total
    # step time can never be repaid by this job.
    if compile_ms <= max(run_ms, 0.0):
        return []
    return [
        make(
            run,
            s.id,
            s.format_title(seconds=compile_ms / 1e3, count=steps, known=known),
            compile_ms / steps - step_ms,
            {
                "compile_s": compile_ms / 1e3,
                "steps": steps,
                "job_length": known,
                "step_time_total_s": run_ms / 1e3,
            },
            _compile_fix(run),
        )
    ]


def _break_even(run: RunRecord, compile_ms: float, step_ms: float) -> list[Finding]:
    """A stopped run that does not say its length: the job length compile needs (info)."""
    steps = compile_ms / step_ms
    if steps < th.COMPILE_BREAK_EVEN_STEPS:
        return []
    title = (
        f"torch.compile took {compile_ms / 1e3:.1f} s, as long as {steps:.0f} steps of "
        f"{step_ms:.1f} ms: a job shorter than that never repays it"
    )
    return [
        make(
            run,
            "compile-not-repaid",
            title,
            0.0,
            {"compile_s": compile_ms / 1e3, "break_even_steps": steps},
            _compile_fix(run),
            severity="info",
        )
    ]
