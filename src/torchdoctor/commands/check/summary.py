"""Rank 0's summary: merge the trace analyser's findings with the run-level ones, write
``report.txt`` / ``report.json`` and the combined ``run.json``, and print the report."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import signal
from pathlib import Path
from typing import Any

from torchdoctor.capture.fit import fit_to_run
from torchdoctor.capture.measurement import Measurement, measure
from torchdoctor.commands.check.report_doc import finding_from_dict
from torchdoctor.record.run import RunRecord, StepStats
from torchdoctor.rules.account_rules import account_verdict
from torchdoctor.rules.finding import Finding, rank_findings
from torchdoctor.rules.probe_effect import ProbeEffect
from torchdoctor.rules.registry import alias_map
from torchdoctor.rules.same_cause import fold_same_cause
from torchdoctor.stats import median

REPORT_SCHEMA = "torchdoctor.check-report"
REPORT_SCHEMA_VERSION = 1

# A trace finding and a run-level finding that describe one problem: keep one (the run-level
# one names the setting or line to change), with the larger saving and both sets of evidence.
# The pairs are the registry's aliases (rules/registry.py).
SAME_PROBLEM = alias_map()


def contradicted(f: Finding, run: RunRecord) -> bool:
    """True when what the run watched directly disproves a finding guessed from the trace.

    ``check`` sees every ``nn.DataParallel`` construction, so a trace-based DataParallel
    finding (from op names) is dropped when none was built.
    """
    built = run.config.data_parallel  # None: not watched
    return f.id == "data-parallel" and built is not None and not built


def merge_findings(
    trace: list[Finding], run: list[Finding], record: dict[str, Any] | None = None
) -> list[Finding]:
    """Union of both lists, one finding per problem, ranked by estimated saving."""
    if record is not None:
        watched = RunRecord.from_dict(record)
        trace = [f for f in trace if not contradicted(f, watched)]
    by_id: dict[str, Finding] = {}
    for f in [*run, *trace]:
        key = next((r for t, r in SAME_PROBLEM.items() if f.id == t), f.id)
        kept = by_id.get(key)
        by_id[key] = f if kept is None else _combine(kept, f)
    # one cause at one site reported by two findings of different ids: one finding
    return rank_findings(fold_same_cause(list(by_id.values()), record))


def _combine(kept: Finding, other: Finding) -> Finding:
    best = max((kept, other), key=lambda f: f.saving_ms_per_step)
    evidence = {**kept.evidence, f"{other.id}_evidence": other.evidence}
    where = list(dict.fromkeys([*kept.where, *other.where]))
    title = kept.title
    if best is other and other.saving_ms_per_step > 1.05 * kept.saving_ms_per_step:
        # the saving shown is the other analysis's: the title says where that number is from
        title += (
            f"; the trace shows {other.saving_ms_per_step:.1f} ms per step "
            f"({other.share_of_step:.0%}) lost to it"
        )
    return dataclasses.replace(
        kept,
        title=title,
        saving_ms_per_step=best.saving_ms_per_step,
        share_of_step=best.share_of_step,
        severity=min(kept.severity, other.severity, key=["critical", "warning", "info"].index),
        evidence=evidence,
        where=where,
    )


def analyze_trace(path: Path) -> tuple[Any, str | None]:
    """Run the trace analyser on a trace file or folder of per-rank traces.

    Returns ``(report, None)``, or ``(None, why)`` when the analyser fails; the run-level
    findings are reported either way.
    """
    from torchdoctor.commands.analyze.trace import analyze_path

    try:
        return analyze_path(str(path)), None
    except Exception as exc:
        return None, f"trace analysis failed: {type(exc).__name__}: {exc}"


def rank_table(records: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-rank step count, median step (ms), mean data wait (ms) and exit status."""
    rows = []
    for r, record in sorted(records.items()):
        run = RunRecord.from_dict(record)
        rows.append(
            {
                "rank": r,
                "steps": run.steps.count,
                "median_step_ms": run.steps.median_step_ms,
                "mean_data_wait_ms": run.steps.measured_mean_data_wait_ms,
                "exit": run.exit_status,
            }
        )
    return rows


def build_report(
    records: dict[int, dict[str, Any]], trace: Path | None, world_size: int
) -> tuple[dict[str, Any], Any, list[Finding]]:
    """The check report document, the analyser's report (or ``None``) and merged findings."""
    from torchdoctor.report.serialize import report_dict

    primary = records.get(0) or next(iter(records.values()))
    run = RunRecord.from_dict(primary)
    measured = measure(run)
    if measured.failure is not None:  # the script never ran: no step advice at all
        trace, run_level = None, []
    else:
        run_level = [finding_from_dict(d) for d in run.findings]
    analysis, why = (None, "no trace was recorded") if trace is None else analyze_trace(trace)
    trace_findings = list(getattr(analysis, "findings", []) or [])
    merged = fit_to_run(merge_findings(trace_findings, run_level, primary), primary)
    merged, account = _account(primary, run.script, merged, measured)
    # the account places findings on the user's lines: two that now share one are one cause
    merged = rank_findings(fold_same_cause(merged, primary))
    merged, effect, effect_notes = _probe_effect(primary, merged, analysis, measured)
    verdict = _verdict(analysis, merged, measured, account, effect)
    analysis_doc = report_dict(analysis) if analysis is not None else None
    if isinstance(analysis_doc, dict) and verdict is not None:
        analysis_doc["verdict"] = verdict  # the analyser saw only the trace's findings
    doc = {
        "schema": REPORT_SCHEMA,
        "schema_version": REPORT_SCHEMA_VERSION,
        "script": run.script,
        "world_size": world_size,
        "ranks_reported": sorted(records),
        "ranks": rank_table(records),
        "trace": None if trace is None else str(trace),
        "analysis": analysis_doc,
        "analysis_unavailable": why,
        "verdict": verdict,
        "measurement": measured.to_dict(),
        "probe_effect": effect.to_dict() if effect is not None else None,
        "findings": [f.to_dict() for f in merged],
        "account": account,
        "lines": run.recorded("lines"),
        "roofline": run.recorded("roofline"),
        "notes": [*run.notes, *effect_notes],
    }
    return doc, analysis, merged


def _account(
    record: dict[str, Any], script: str | None, merged: list[Finding], measured: Measurement
) -> tuple[list[Finding], dict[str, Any] | None]:
    """The merged findings with ``unexplained-step-time`` when the account leaves time
    unexplained, and the account itself (``report.json``'s ``account``)."""
    if measured.failure is not None:
        return merged, None
    from torchdoctor.rules.account_rules import step_account, unexplained

    try:
        extra = unexplained(record, merged)
        if extra is not None:
            from torchdoctor.capture.fit_names import fit_names

            # built after fit_to_run: its code is fitted to the script's names here
            extra = dataclasses.replace(extra, fix=fit_names(extra.fix, script))
            merged = _after_its_causes(rank_findings([*merged, extra]), extra)
        account = step_account(record, merged)
    except Exception as exc:  # the account is a bonus: the findings stand without it
        return merged, {"error": f"{type(exc).__name__}: {exc}"}
    return merged, None if account is None else account.to_dict()


def _probe_effect(
    record: dict[str, Any], merged: list[Finding], analysis: Any, measured: Measurement
) -> tuple[list[Finding], ProbeEffect | None, tuple[str, ...]]:
    """The findings scaled to the clean step, the probe effect (``rules/probe_effect.py``) and
    the report's note when it could not be measured; the findings as they are when the run had
    no clean window."""
    if measured.failure is not None:
        return merged, None, ()
    from torchdoctor.rules import probe_effect

    try:
        effect = probe_effect.measure(record, _gpu_busy_ms(analysis))
        if effect is None:
            return merged, None, ()
        scaled, effect = probe_effect.apply(merged, effect, record)
        # ranked again by the scaled savings: the unexplained time still follows its causes
        extra = next((f for f in scaled if f.id == "unexplained-step-time"), None)
        return (_after_its_causes(scaled, extra) if extra is not None else scaled), effect, ()
    except Exception as exc:  # the findings stand as measured; the report says why
        why = f"the probe effect could not be measured: {type(exc).__name__}: {exc}"
        return merged, None, (why,)


def _gpu_busy_ms(analysis: Any) -> float | None:
    """The trace's GPU busy time per step (kernels do not slow under the profiler)."""
    a = getattr(analysis, "analysis", None)
    if a is None or not getattr(a, "has_gpu", False) or not getattr(a, "mean_step_ms", None):
        return None
    return float(a.gpu_busy_share) * float(a.mean_step_ms)


def _site(where: str) -> str:
    return where.split(" in ")[0]


def _after_its_causes(ranked: list[Finding], extra: Finding) -> list[Finding]:
    """The unexplained time is what is left after the named findings; where a named, actionable
    finding points at the same line as the unexplained time's top lines (tiny operators under
    ``opt.step()``: host-bound), that finding is its cause and is ranked first."""
    top = {_site(w) for w in extra.where[:2]}
    causes = [
        i
        for i, f in enumerate(ranked)
        if f is not extra and f.severity != "info" and top & {_site(w) for w in f.where}
    ]
    if not causes:
        return ranked
    rest = [f for f in ranked if f is not extra]
    last = rest.index(ranked[max(causes)])
    return [*rest[: last + 1], extra, *rest[last + 1 :]]


def _verdict(
    analysis: Any,
    merged: list[Finding],
    measured: Measurement,
    account: dict[str, Any] | None,
    effect: ProbeEffect | None = None,
) -> str | None:
    """The verdict line over the merged findings; the measurement note for a short run."""
    if measured.note:
        return measured.note
    if analysis is None:
        return None
    try:
        from torchdoctor.report.assemble import verdict

        clean = effect.clean_ms if effect is not None else None
        line = verdict(getattr(analysis, "analysis"), merged, clean_step_ms=clean)  # noqa: B009
        return account_verdict(line, account)
    except Exception:
        return None


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def summary_text(doc: dict[str, Any], run: RunRecord, top: int, with_findings: bool = True) -> str:
    """The run-level part of the report as plain text (steps, ranks, compile, findings)."""
    out = io.StringIO()
    steps, c = run.steps, run.compile
    w = out.write
    w(f"torchdoctor check: {doc['script']}  (exit: {_ending(run)}, code {run.exit_code})\n")
    w(
        f"steps: {steps.count} by {steps.source or 'no signal'}; "
        f"{_plan(steps)}; median profiled step {_fmt(steps.median_step_ms)} ms, "
        f"data wait {_fmt(steps.measured_mean_data_wait_ms)} ms\n"
    )
    if doc["world_size"] > 1:
        w(f"ranks ({len(doc['ranks_reported'])}/{doc['world_size']} reported):\n")
        for row in doc["ranks"]:
            w(
                f"  rank {row['rank']}: {row['steps']} steps, median step "
                f"{_fmt(row['median_step_ms'])} ms, data wait {_fmt(row['mean_data_wait_ms'])} ms"
                f", {row['exit']}\n"
            )
        meds = [r["median_step_ms"] for r in doc["ranks"] if r["median_step_ms"]]
        if len(meds) > 1:
            w(
                f"  slowest/fastest rank: {max(meds) / min(meds):.2f}x (median {median(meds):.1f} ms)\n"
            )
    if c.compiles:
        w(
            f"torch.compile: {c.compiles} compiles ({c.compile_s:.2f} s), "
            f"{c.recompiles} recompiles, {len(c.graph_breaks)} graph break sites\n"
        )
    effect = doc.get("probe_effect")
    if isinstance(effect, dict):
        from torchdoctor.rules.probe_effect import effect_from_dict

        for line in effect_from_dict(effect).lines():
            w(line + "\n")
    gpm = run.gpu.gpm if run.gpu is not None else None
    if gpm is not None:
        from torchdoctor.capture.gpm import gpm_lines

        for line in gpm_lines(gpm):
            w(f"  {line}\n")
    note = (doc.get("measurement") or {}).get("note")
    if note:
        w(f"measured: {note}\n")
    early = run.profiler_stopped_early
    if early:
        w(f"profiling stopped early: {early}; the report covers what was recorded\n")
    for err in steps.clock_errors:  # e.g. the script runs its own profiler
        w(f"profiling problem: {err}\n")
    if doc.get("analysis_unavailable"):
        w(f"trace analysis: {doc['analysis_unavailable']}\n")
    if with_findings and not (doc.get("measurement") or {}).get("failure"):
        w(_findings_text(doc["findings"][:top], complete=not note))
    return out.getvalue()


def _ending(run: RunRecord) -> str:
    """The run's exit status in words: ``killed`` names its signal (the shell's code is
    128 + N; check's own process ends by the same signal)."""
    status, code = run.exit_status, run.exit_code
    if status == "killed" and code is not None and code > 128:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(code - 128).name}"
    return str(status)


def _plan(steps: StepStats) -> str:
    """Which steps were warm-up, clean, profiled and after, in words."""
    if steps.scheduled_warmup is None:
        return f"warm-up {steps.warmup_steps}, profiled {steps.profiled_steps}"
    parts = [f"warm-up {steps.scheduled_warmup}"]
    if steps.clean_steps:
        parts.append(f"clean {steps.clean_steps}")
    parts.append(f"profiled {steps.profiled_steps}")
    if steps.after_steps:
        parts.append(f"after {steps.after_steps}")
    return ", ".join(parts)


def _findings_text(findings: list[dict[str, Any]], complete: bool = True) -> str:
    if not findings:
        return "findings: none\n" if complete else "findings: none in the steps measured\n"
    lines = ["findings (by estimated saving per step):"]
    for i, f in enumerate(findings, 1):
        saving = f"saves ~{f['saving_ms_per_step']:.2f} ms/step, {f['share_of_step']:.0%}"
        if (f.get("cost_unit") or "step") != "step":  # a cost of the job: never a step's share
            from torchdoctor.report.saving_text import saving_text

            saving = saving_text(f) or saving
        lines.append(f"{i}. [{f['severity']}] {f['id']}: {f['title']}  ({saving})")
        for site in f.get("where", [])[:3]:
            lines.append(f"     at {site}")
        lines.extend(
            f"     fix: {ln}" if j == 0 else f"          {ln}"
            for j, ln in enumerate(f["fix"].splitlines())
        )
    return "\n".join(lines) + "\n"


def _with_findings(
    analysis: Any,
    merged: list[Finding],
    measured: Measurement | None = None,
    account: dict[str, Any] | None = None,
    verdict_line: str | None = None,
) -> tuple[Any, bool]:
    """The analyser's report with the merged findings (and a verdict that sees them).

    A run that measured fewer steps than requested gets its measurement note as the verdict:
    too few steps are never reported as "no bottleneck".
    """
    if not (dataclasses.is_dataclass(analysis) and hasattr(analysis, "findings")):
        return analysis, False
    changes: dict[str, Any] = {"findings": merged}
    with contextlib.suppress(Exception):
        from torchdoctor.report.assemble import verdict

        changes["verdict"] = account_verdict(
            verdict(getattr(analysis, "analysis"), merged),  # noqa: B009
            account,
        )
    if verdict_line:  # the report's own verdict (the clean step's)
        changes["verdict"] = verdict_line
    if measured is not None and measured.note:
        changes["verdict"] = measured.note
    try:
        return dataclasses.replace(analysis, **changes), True  # type: ignore[type-var]
    except Exception:  # a report type we cannot rebuild: our list is printed separately
        return analysis, False


def render_analysis(
    analysis: Any,
    merged: list[Finding],
    top: int,
    measured: Measurement | None = None,
    account: dict[str, Any] | None = None,
    verdict_line: str | None = None,
    width: int | None = None,
) -> tuple[str, bool]:
    """The analyser's text report and whether it shows the merged findings ('' if none), laid
    out to ``width`` columns as ``analyze`` lays it out (None: tables at 110 columns and prose
    unwrapped, for a log or a file)."""
    if analysis is None:
        return "", False
    from torchdoctor.report.render import render_text

    analysis, replaced = _with_findings(analysis, merged, measured, account, verdict_line)
    buf = io.StringIO()
    try:
        from rich.console import Console

        console = (
            Console(file=buf, width=110, soft_wrap=True)
            if width is None
            else Console(file=buf, width=width, highlight=False)
        )
        render_text(analysis, top=top, console=console)
    except Exception as exc:
        return f"(trace report could not be rendered: {type(exc).__name__}: {exc})\n", False
    return buf.getvalue(), replaced
