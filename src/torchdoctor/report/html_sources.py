"""HTML pages for ``check`` (a run's record plus its trace's report) and ``tune`` (its trials)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from torchdoctor._version import __version__
from torchdoctor.report.html_model import Page, Table, command_line, page_from_report


def page_from_check(doc: dict[str, Any], report: Any, record: dict[str, Any]) -> Page:
    """The check page: the trace's page (when there is one) with the merged findings and the run's
    own metadata (torch version, script, step clock)."""
    steps = record.get("steps") or {}
    verdict = (
        f"{steps.get('count', 0)} steps seen, median step "
        f"{_num(steps.get('median_step_ms'))} ms, data wait {_num(steps.get('mean_data_wait_ms'))} ms"
    )
    if report is not None and hasattr(report, "analysis"):
        page = page_from_report(report, title="torchdoctor check")
        if doc.get("findings") and getattr(report, "verdict", None):
            from torchdoctor.report.assemble import verdict as verdict_line
            from torchdoctor.rules.finding import Finding

            names = {f.name for f in dataclasses.fields(Finding)}
            merged = [
                Finding(**{k: v for k, v in d.items() if k in names}) for d in doc["findings"]
            ]
            page.verdict = verdict_line(report.analysis, merged)
        if getattr(page, "verdict", None):
            from torchdoctor.rules.account_rules import account_verdict

            page.verdict = account_verdict(page.verdict, doc.get("account"))
    else:
        page = Page(title="torchdoctor check", verdict=verdict, metadata=[])
        if doc.get("analysis_unavailable"):
            page.notes.append(f"trace analysis: {doc['analysis_unavailable']}")
    page.findings = list(doc.get("findings") or [])
    page.headline = [verdict]
    _add_account(page, doc, record)
    page.metadata = _run_metadata(doc, record) + [
        kv for kv in page.metadata if kv[0] in ("trace", "steps", "events", "rank")
    ]
    if doc.get("world_size", 1) > 1:
        page.tables.insert(0, _check_ranks(doc))
    return page


def _add_account(page: Page, doc: dict[str, Any], record: dict[str, Any]) -> None:
    """The roofline line (achieved efficiency) in the headline and the per-line time table."""
    from torchdoctor.report.account_text import roofline_line

    if (doc.get("measurement") or {}).get("failure"):
        return
    page.headline.extend(ln for ln in roofline_line(record, doc.get("account")).splitlines() if ln)
    lines = record.get("lines") or {}
    rows = lines.get("rows") or []
    if not rows:
        return
    cats = ["torch ops", "Python", "I/O", "sleep/wait", "gc", "CPU contention"]
    table_rows = [
        [
            r.get("site"),
            r.get("function"),
            r.get("code"),
            r.get("self_ms"),
            r.get("inclusive_ms"),
            r.get("self_share"),
            *[(r.get("under") or {}).get(c, 0.0) for c in cats],
            ", ".join(str(o[0]) for o in (r.get("ops") or [])[:3]),
        ]
        for r in rows
    ]
    page.tables.insert(
        0,
        Table(
            "lines",
            "Where the time goes: your lines (ms per step)",
            [
                "line",
                "function",
                "code",
                "self ms",
                "inclusive ms",
                "self share",
                *cats,
                "operators",
            ],
            table_rows,
            caption=f"Sampled every {float(lines.get('interval_s') or 0) * 1e3:.0f} ms: "
            f"{lines.get('samples')} samples over {lines.get('steps')} measured steps. Self time "
            "is spent at the line itself (its innermost frame of yours), inclusive time under it.",
        ),
    )


def _num(v: Any) -> str:
    return "-" if v is None else f"{float(v):.1f}"


def _run_metadata(doc: dict[str, Any], record: dict[str, Any]) -> list[tuple[str, str]]:
    gpu = ((record.get("gpu") or {}).get("device") or {}).get("name")
    return [
        ("GPU", str(gpu) if gpu else ("none" if not record.get("cuda_available") else "?")),
        ("torch version", str(record.get("torch_version", "?"))),
        ("script", f"{doc.get('script')} {' '.join(map(str, record.get('argv') or []))}".strip()),
        ("python", str(record.get("python_version", "?"))),
        ("torchdoctor", __version__),
        ("command", command_line()),
    ]


def _check_ranks(doc: dict[str, Any]) -> Table:
    cols = ["rank", "steps", "median step ms", "mean data wait ms", "exit"]
    keys = ["rank", "steps", "median_step_ms", "mean_data_wait_ms", "exit"]
    return Table(
        "run-ranks", "Ranks", cols, [[r.get(k) for k in keys] for r in doc.get("ranks", [])]
    )


def write_check_html(path: str, doc: dict[str, Any], report: Any, record: dict[str, Any]) -> Path:
    """Write the check page (used by ``check --html``)."""
    from torchdoctor.report.html import write_html

    return write_html(page_from_check(doc, report, record), path)


def page_from_tune(data: dict[str, Any], workload: str = "") -> Page:
    """Every trial with its interval, fidelity verdict and failure reason; the pick highlighted."""
    ranked = data.get("ranked") or []
    best = data.get("best") or {}
    rows, pick = [], None
    for i, r in enumerate(ranked):
        if r.get("seq") == best.get("seq"):
            pick = i
        rows.append(_trial_row(r))
    cols = [
        "#",
        "configuration",
        "phase",
        "median step ms",
        "IQR ms",
        "speedup",
        "speed-up interval",
        "samples/s",
        "peak MiB",
        "status",
        "fidelity",
        "reason",
    ]
    speed = data.get("confirmed_speedup")
    verdict = f"best: {best.get('config', '?')}" + (f", {speed:.2f}x the baseline" if speed else "")
    headline = [
        f"trials: {data.get('trials')} (grid: {data.get('grid_size')}); stopped by "
        f"{data.get('stopped_by')}; confirmed on re-measurement: {data.get('confirmed')}",
    ]
    if data.get("drift") is not None:
        headline.append(f"baseline drift over the search: {data['drift']:.1%}")
    return Page(
        title="torchdoctor tune",
        verdict=verdict,
        metadata=[
            ("workload", workload or "?"),
            ("knob order", ", ".join(data.get("knob_order") or []) or "(default)"),
            ("findings used", ", ".join(data.get("finding_ids") or []) or "none"),
            ("torchdoctor", __version__),
            ("command", command_line()),
        ],
        tables=[
            Table(
                "trials", "Trials (fastest usable first; the pick is highlighted)", cols, rows, pick
            )
        ],
        headline=headline,
    )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _trial_row(r: dict[str, Any]) -> list[Any]:
    f = r.get("fidelity") or {}
    fidelity = "" if not f else ("ok" if f.get("ok") else "rejected")
    if f.get("max_rel_dev") is not None:
        fidelity += f" (dev {f['max_rel_dev']:.1e}, tol {f.get('tolerance', 0):.0e})"
    peak = r.get("peak_bytes")
    return [
        r.get("seq", 0) + 1,
        r.get("config"),
        r.get("phase"),
        _ms(r.get("median_step_s")),
        _ms(r.get("iqr_step_s")),
        r.get("speedup"),
        _interval(r.get("speedup_interval")),
        r.get("samples_per_s"),
        None if not peak else peak / 2**20,
        r.get("status"),
        fidelity,
        r.get("reason") or f.get("reason") or "",
    ]


def _interval(iv: Any) -> str:
    """``[1.22-1.40] (95%)`` from tune's speed-up interval, when its results carry one."""
    if not isinstance(iv, dict) or iv.get("low") is None or iv.get("high") is None:
        return ""
    conf = iv.get("confidence")
    return f"[{iv['low']:.2f}-{iv['high']:.2f}]" + (f" ({conf:.0%})" if conf else "")


def write_tune_html(path: str, data: dict[str, Any], workload: str) -> Path:
    """Write the tune page (used by ``tune --html``)."""
    from torchdoctor.report.html import write_html

    return write_html(page_from_tune(data, workload), path)
