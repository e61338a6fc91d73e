"""The step's account in the ``check`` report, as text: the roofline line (achieved efficiency)
and the per-line time table."""

from __future__ import annotations

import io
from typing import Any

from torchdoctor.rules.thresholds import EXPLAINED_EFFICIENCY

_COLS = ("torch ops", "Python", "I/O", "sleep/wait", "gc", "CPU contention")


def _short(site: str) -> str:
    file, _, line = str(site).rpartition(":")
    return f"{file.rsplit('/', 1)[-1]}:{line}" if file else str(site)


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.1f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def roofline_line(record: dict[str, Any], account: dict[str, Any] | None) -> str:
    """One line: work per step, attainable rates, roofline time and achieved efficiency."""
    roof = record.get("roofline") or {}
    work = roof.get("work") or {}
    eff = roof.get("efficiency") or {}
    att = roof.get("attainable") or {}
    if not eff:
        why = roof.get("unavailable") or (roof.get("error") or "not measured")
        return f"roofline: not available ({why}); efficiency unknown\n"
    rates = ", ".join(f"{_si(v, 'FLOP/s')} {k}" for k, v in (att.get("flops_per_s") or {}).items())
    text = (
        f"roofline: {_si(float(work.get('flops_per_step') or 0), 'FLOP')} and "
        f"{_si(float(work.get('bytes_per_step') or 0), 'B')} per step; attainable {rates}, "
        f"{_si(float(att.get('bytes_per_s') or 0), 'B/s')} ({att.get('source', '?')})\n"
        f"efficiency: the step takes {eff['step_ms']:.1f} ms, its roofline {eff['roofline_ms']:.2f} ms: "
        f"{eff['share']:.0%} of attainable (FLOP/s {eff['flops_share']:.0%}, "
        f"bandwidth {eff['bytes_share']:.0%})"
    )
    if account:
        state = "explained" if account.get("explained") else "not explained"
        text += (
            f"; {state}: {account['unexplained_ms']:.1f} ms per step "
            f"({account['unexplained_share']:.0%}) left over beyond "
            f"{1 / EXPLAINED_EFFICIENCY:.0f}x the roofline and what the findings claim"
        )
        if account.get("contention_ms"):
            text += (
                f" (and {account['contention_ms']:.1f} ms waiting for a CPU other processes held)"
            )
    return text + "\n"


def line_table_text(record: dict[str, Any], top: int = 10) -> str:
    """The per-line table: self and inclusive ms per step, share, what runs under each line."""
    lines = record.get("lines") or {}
    rows = lines.get("rows") or []
    out = io.StringIO()
    w = out.write
    if not rows:
        why = lines.get("unavailable") or lines.get("error") or "no samples"
        w(f"where the time goes: not sampled ({why})\n")
        return out.getvalue()
    cats = lines.get("categories") or {}
    total = sum(float(v) for v in cats.values()) or 1.0
    w(
        "where the time goes (your lines; sampled every "
        f"{float(lines.get('interval_s') or 0) * 1e3:.0f} ms, {lines.get('samples')} samples over "
        f"{lines.get('steps')} steps): "
        + ", ".join(f"{c} {float(cats.get(c) or 0) / total:.0%}" for c in _COLS if cats.get(c))
        + "\n"
    )
    w(f"  {'self ms':>8} {'incl ms':>8} {'share':>6}  {'line':<28} {'function':<18} under it\n")
    for r in sorted(rows, key=lambda r: -float(r.get("self_ms") or 0))[:top]:
        under = r.get("under") or {}
        what = ", ".join(
            f"{c} {float(v):.1f}"
            for c, v in sorted(under.items(), key=lambda kv: -float(kv[1]))[:3]
        )
        ops = r.get("ops") or []
        if ops:
            what += " [" + ", ".join(str(o[0]).replace("aten::", "") for o in ops[:2]) + "]"
        w(
            f"  {float(r.get('self_ms') or 0):8.2f} {float(r.get('inclusive_ms') or 0):8.2f} "
            f"{float(r.get('self_share') or 0):6.0%}  {_short(r['site']):<28.28} "
            f"{r.get('function') or ''!s:<18.18} {what}\n"
        )
        if r.get("code"):
            w(f"  {'':>8} {'':>8} {'':>6}    {str(r['code'])[:90]}\n")
    return out.getvalue()


def account_text(doc: dict[str, Any], record: dict[str, Any], top: int = 10) -> str:
    """Both parts, for the end of the check report."""
    if (doc.get("measurement") or {}).get("failure"):
        return ""
    return roofline_line(record, doc.get("account")) + line_table_text(record, top)
