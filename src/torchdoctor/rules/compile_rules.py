"""Run-level rules about torch.compile: recompiles, the recompile limit, graph breaks, and
compile time that the run does not earn back."""

from __future__ import annotations

from typing import Any

from torchdoctor.rules.finding import Finding
from torchdoctor.rules.run_common import (
    GRAPH_BREAK_MAX_SHARE,
    GRAPH_BREAK_SHARE,
    make,
    measured_steps,
    run_step_ms,
)


def _recompile_saving_ms(run: dict[str, Any], c: dict[str, Any]) -> float:
    late, measured = int(c.get("recompiles_in_window") or 0), measured_steps(run)
    count = int((run.get("steps") or {}).get("count") or 0)
    if late and measured:
        return float(c["recompile_s_in_window"]) * 1e3 / measured
    if (run.get("exit") or {}).get("status") == "completed" and count:
        return float(c.get("recompile_s") or 0.0) * 1e3 / count  # the whole run: exact
    return 0.0  # only during warm-up in a run we stopped: a one-time cost, not a per-step one


def _recompile_fix(reasons: list[str]) -> str:
    if any("size mismatch" in r or "stride mismatch" in r for r in reasons):
        return (
            "torch._dynamo.mark_dynamic(x, 0)  # before the first call, each varying dimension\n"
            "# or: model = torch.compile(model, dynamic=True)\n"
            "# or pad/bucket inputs to a few fixed sizes"
        )
    return (
        "Keep the guarded values constant across steps (see the reasons), or move them out "
        "of the compiled function"
    )


def recompiles(run: dict[str, Any]) -> list[Finding]:
    """Recompiles; saving (ms/step): recompile time in the measured steps per measured step."""
    c = run.get("compile") or {}
    n = int(c.get("recompiles") or 0)
    if n == 0:
        return []
    late = int(c.get("recompiles_in_window") or 0)
    events = c.get("recompile_events") or []
    reasons = list(dict.fromkeys(e["reason"] for e in events if e.get("reason")))
    sites = [f"{e['site']} ({e['function']})" for e in events if not e["site"].startswith("?")]
    first = reasons[0] if reasons else "see evidence"
    return [
        make(
            run,
            "recompiles",
            f"{n} recompiles ({c.get('recompile_s', 0.0):.2f} s), {late} after warm-up: {first}",
            _recompile_saving_ms(run, c),
            {
                "recompiles": n,
                "recompile_s": c.get("recompile_s"),
                "recompiles_after_warmup": late,
                "recompile_s_after_warmup": c.get("recompile_s_in_window"),
                "reasons": reasons[:8],
            },
            _recompile_fix(reasons),
            "Each recompile stops the step to trace and compile again; a guard on a size that "
            "changes every step means the compiled code is rarely reused.",
            list(dict.fromkeys(sites))[:8],
            floor="warning" if late else "info",
        )
    ]


def recompile_limit(run: dict[str, Any]) -> list[Finding]:
    """The recompile limit was hit (the function now runs eager); saving unknown (0 ms)."""
    hits = (run.get("compile") or {}).get("recompile_limit_hits") or []
    if not hits:
        return []
    h = hits[0]
    return [
        make(
            run,
            "recompile-limit-hit",
            f"recompile limit ({h['limit']}) hit in {h['function']}: it now runs eager, silently",
            0.0,
            {"hits": hits[:8]},
            "torch._dynamo.mark_dynamic(x, 0)  # or torch.compile(..., dynamic=True)\n"
            "# to fail loudly instead: torch._dynamo.config.fail_on_recompile_limit_hit = True",
            "After recompile_limit recompiles of one function dynamo stops compiling it and "
            "falls back to eager for the rest of the run; the speed-up is gone without an error.",
            [h["site"]] if h.get("site") else [],
            severity="warning",
        )
    ]


def graph_breaks(run: dict[str, Any]) -> list[Finding]:
    """Graph breaks with user lines; saving (ms/step): GRAPH_BREAK_SHARE of the step each."""
    breaks = (run.get("compile") or {}).get("graph_breaks") or []
    if not breaks:
        return []
    sites = list(dict.fromkeys(b["site"] for b in breaks))
    share = min(GRAPH_BREAK_MAX_SHARE, GRAPH_BREAK_SHARE * len(sites))
    step = run_step_ms(run) or 0.0
    top = breaks[0]
    return [
        make(
            run,
            "graph-breaks",
            f"{len(sites)} graph break location(s) in compiled code; first: {top['reason']}",
            share * step,
            {"locations": len(sites), "breaks": breaks[:10]},
            f"Change the line at {top['site']} so dynamo can trace it (no print/.item()/numpy/"
            "data-dependent Python branch inside the compiled function), or move it out; "
            "check with torch.compile(model, fullgraph=True)",
            "A graph break ends one compiled graph and starts another: the code between runs "
            "eagerly, guards are checked again, and nothing fuses across the break.",
            sites[:10],
            floor="warning",
        )
    ]


def compile_not_repaid(run: dict[str, Any]) -> list[Finding]:
    """Compile time above the whole run's step time; saving (ms/step): compile per step - step."""
    c, steps = run.get("compile") or {}, run.get("steps") or {}
    compile_ms = float(c.get("compile_s") or 0.0) * 1e3
    ran_to_end = (run.get("exit") or {}).get("status") == "completed"
    step_ms, count = run_step_ms(run), int(steps.get("count") or 0)
    if not (ran_to_end and compile_ms and step_ms and count):
        return []
    run_ms = sum(steps.get("step_ms") or []) - compile_ms
    # Even a 2x speed-up saves at most one step time per step: compile time above the total
    # step time can never be repaid by this run.
    if compile_ms <= max(run_ms, 0.0):
        return []
    return [
        make(
            run,
            "compile-not-repaid",
            f"torch.compile took {compile_ms / 1e3:.1f} s in a run of {count} steps",
            compile_ms / count - step_ms,
            {"compile_s": compile_ms / 1e3, "steps": count, "step_time_total_s": run_ms / 1e3},
            "Run eager for short jobs, or reuse compiled artifacts across runs:\n"
            "export TORCHINDUCTOR_CACHE_DIR=/persistent/cache  # warm cache: seconds, not minutes",
            "Compilation is paid once per process; a run shorter than its compile time never "
            "earns it back.",
        )
    ]


# -- input pipeline and copies ------------------------------------------------------------------
