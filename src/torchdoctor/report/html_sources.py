"""HTML pages for ``check`` (a run's record plus its trace's report) and ``tune`` (its trials)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from torchdoctor._version import __version__
from torchdoctor.record.run import RunRecord
from torchdoctor.report.html_model import (
    Num,
    Page,
    Table,
    command_line,
    page_from_report,
    share,
)


def page_from_check(doc: dict[str, Any], report: Any, run: RunRecord) -> Page:
    """The check page: the trace's page (when there is one) with the merged findings and the run's
    own metadata (torch version, script, step clock)."""
    steps = run.steps
    verdict = (
        f"{steps.count} steps seen, median profiled step "
        f"{_num(steps.median_step_ms)} ms, data wait {_num(steps.measured_mean_data_wait_ms)} ms"
    )
    effect = doc.get("probe_effect")
    probe_lines: list[str] = []
    if isinstance(effect, dict):  # the clean step leads: the profiled one is the instrumented
        from torchdoctor.rules.probe_effect import effect_from_dict

        probe_lines = [line.strip() for line in effect_from_dict(effect).lines()]
    if report is not None and hasattr(report, "analysis"):
        page = page_from_report(report, title="torchdoctor check")
        if doc.get("findings") and getattr(report, "verdict", None):
            from torchdoctor.report.assemble import verdict as verdict_line
            from torchdoctor.rules.finding import Finding

            names = {f.name for f in dataclasses.fields(Finding)}
            merged = [
                Finding(**{k: v for k, v in d.items() if k in names}) for d in doc["findings"]
            ]
            clean = effect.get("clean_ms") if isinstance(effect, dict) else None
            page.verdict = verdict_line(report.analysis, merged, clean_step_ms=clean)
        if getattr(page, "verdict", None):
            from torchdoctor.rules.account_rules import account_verdict

            page.verdict = account_verdict(page.verdict, doc.get("account"))
    else:
        page = Page(title="torchdoctor check", verdict=verdict, metadata=[])
        if doc.get("analysis_unavailable"):
            page.notes.append(f"trace analysis: {doc['analysis_unavailable']}")
    page.findings = list(doc.get("findings") or [])
    page.headline = [*probe_lines, verdict]
    _add_account(page, doc, run)
    page.metadata = _run_metadata(doc, run) + [
        kv for kv in page.metadata if kv[0] in ("trace", "steps", "events", "rank")
    ]
    if doc.get("world_size", 1) > 1:
        page.tables.insert(0, _check_ranks(doc))
    return page


def _add_account(page: Page, doc: dict[str, Any], run: RunRecord) -> None:
    """The roofline line (achieved efficiency) in the headline and the per-line time table."""
    from torchdoctor.report.account_text import roofline_line

    if (doc.get("measurement") or {}).get("failure"):
        return
    page.headline.extend(ln for ln in roofline_line(run, doc.get("account")).splitlines() if ln)
    lines = run.lines
    if not lines.rows:
        return
    cats = ["torch ops", "Python", "I/O", "sleep/wait", "gc", "CPU contention"]
    home = os.path.dirname(str(doc.get("script") or ""))
    table_rows = [
        [
            _short_site(r.site, home),
            r.function,
            r.code,
            r.self_ms,
            r.inclusive_ms,
            share(r.self_share),
            *[r.under.get(c, 0.0) for c in cats],
            ", ".join(name for name, _ in r.ops[:3]),
        ]
        for r in lines.rows
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
            caption=f"Sampled every {lines.interval_s * 1e3:.0f} ms: "
            f"{lines.samples} samples over {lines.steps} measured steps. Self time "
            "is spent at the line itself (its innermost frame of yours), inclusive time under it.",
        ),
    )


def _short_site(site: Any, home: str) -> Any:
    """``train.py:45`` for a line under the script's folder (the whole path repeated on every row
    pushed the table past the page); other paths as they are."""
    if not isinstance(site, str) or not home or not os.path.isabs(site):
        return site
    rel = os.path.relpath(site, home)
    return site if rel.startswith("..") else rel


def _num(v: Any) -> str:
    return "-" if v is None else f"{float(v):.1f}"


def _run_metadata(doc: dict[str, Any], run: RunRecord) -> list[tuple[str, str]]:
    gpu = run.gpu.name if run.gpu is not None else None
    return [
        ("GPU", gpu if gpu else ("none" if not run.cuda_available else "?")),
        ("torch version", run.torch_version or "?"),
        ("script", f"{doc.get('script')} {' '.join(run.argv)}".strip()),
        ("python", run.python_version or "?"),
        ("torchdoctor", __version__),
        ("command", command_line()),
    ]


def _check_ranks(doc: dict[str, Any]) -> Table:
    cols = ["rank", "steps", "median step ms", "mean data wait ms", "exit"]
    keys = ["rank", "steps", "median_step_ms", "mean_data_wait_ms", "exit"]
    return Table(
        "run-ranks", "Ranks", cols, [[r.get(k) for k in keys] for r in doc.get("ranks", [])]
    )


def write_check_html(path: str, doc: dict[str, Any], report: Any, run: RunRecord) -> Path:
    """Write the check page (used by ``check --html``)."""
    from torchdoctor.report.html import write_html

    return write_html(page_from_check(doc, report, run), path)


def page_from_tune(data: dict[str, Any], workload: str = "") -> Page:
    """Every trial with its interval, fidelity verdict and failure reason; the pick highlighted.
    Numbers read as the text report prints them (``1.25x [1.24-1.26]``, ``79.8``)."""
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
        "step ms (median)",
        "IQR ms",
        "vs baseline [95% interval]",
        "samples/s",
        "peak MiB",
        "status",
        "fidelity",
        "reason",
    ]
    verdict = f"best: {best.get('config', '?')}"
    claim = _interval(data.get("claim"))
    if claim and best.get("config") != "baseline":
        verdict += f" — {claim} the baseline's speed (95% interval over interleaved rounds)"
    grid = data.get("grid_size")
    trials = data.get("trials")
    confirmed = data.get("confirmed")
    headline = [
        f"trials: {trials}"
        + (f" (the full grid has {grid} configurations)" if grid else "")
        + f"; stopped by {_stopped(data.get('stopped_by'))}"
        + (
            ""
            if confirmed is None
            else "; confirmed on re-measurement: " + ("yes" if confirmed else "no")
        ),
    ]
    if data.get("drift") is not None:
        headline.append(
            f"baseline drift over the search: {data['drift']:.1%} (comparisons are interleaved, "
            "so drift moves both arms of a round alike)"
        )
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
                "trials",
                "Trials (fastest usable first; the pick is highlighted)",
                cols,
                rows,
                pick,
                caption="Step time is the median over the measured rounds. The speed-up over "
                "the baseline comes with its 95% interval over interleaved rounds (a rank "
                "interval: it covers at least 95%).",
            )
        ],
        headline=headline,
        show_findings=False,
    )


def _stopped(by: Any) -> str:
    return "the end of the grid (every configuration tried)" if by == "done" else str(by or "?")


def _ms(seconds: float | None, digits: int = 1) -> Num | None:
    if seconds is None:
        return None
    return Num(seconds * 1e3, f"{seconds * 1e3:.{digits}f}")


def _trial_row(r: dict[str, Any]) -> list[Any]:
    f = r.get("fidelity") or {}
    fidelity = "" if not f else ("ok" if f.get("ok") else "rejected")
    if f.get("max_rel_dev") is not None:
        fidelity += f" (dev {f['max_rel_dev']:.1e} ≤ {f.get('tolerance', 0):.0e})"
    peak = r.get("peak_bytes")
    speedup = r.get("speedup")
    interval = _interval(r.get("speedup_interval"))
    sps = r.get("samples_per_s")
    return [
        r.get("seq", 0) + 1,
        r.get("config"),
        r.get("phase"),
        _ms(r.get("median_step_s")),
        _ms(r.get("iqr_step_s")),
        None if speedup is None else Num(float(speedup), interval or f"{speedup:.2f}x"),
        None if not sps else Num(float(sps), f"{sps:,.0f}"),
        None if not peak else Num(peak / 2**20, f"{peak / 2**20:,.0f}"),
        r.get("status"),
        fidelity,
        r.get("reason") or f.get("reason") or "",
    ]


def _interval(iv: Any) -> str:
    """``1.25x [1.24-1.26]`` from tune's speed-up interval, as the text report prints it."""
    if not isinstance(iv, dict) or iv.get("ratio") is None:
        return ""
    text = f"{iv['ratio']:.2f}x"
    low, high = iv.get("low"), iv.get("high")
    if low is None or high is None or low <= 0:
        return text + " [?]"
    return text + f" [{low:.2f}-{high:.2f}]"


def write_tune_html(path: str, data: dict[str, Any], workload: str) -> Path:
    """Write the tune page (used by ``tune --html``)."""
    from torchdoctor.report.html import write_html

    return write_html(page_from_tune(data, workload), path)
