"""The step's account in the ``check`` report, as text: the roofline line (achieved efficiency)
and the per-line time table."""

from __future__ import annotations

import io
from typing import Any

from torchdoctor.record.floors import StepFloors, step_floors
from torchdoctor.record.lines import LineRow
from torchdoctor.record.run import RunRecord
from torchdoctor.report.layout import fit
from torchdoctor.roofline import Attainable
from torchdoctor.rules.sites import short_site
from torchdoctor.rules.thresholds import EXPLAINED_EFFICIENCY

_COLS = ("torch ops", "Python", "I/O", "sleep/wait", "gc", "CPU contention")


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.1f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def _rates(att: dict[str, Any]) -> str:
    """The attainable FLOP/s per dtype, with which precision mode the fp32 rate is."""
    mode = Attainable.from_dict(att).fp32_mode
    parts = []
    for k, v in (att.get("flops_per_s") or {}).items():
        if k == "fp32" and mode:
            how = "TF32 on: the TF32 rate" if mode == "tf32" else "CUDA cores, TF32 off"
            parts.append(f"{_si(v, 'FLOP/s')} fp32 ({how})")
        elif not (k == "tf32" and mode == "tf32"):
            parts.append(f"{_si(v, 'FLOP/s')} {k}")
    return ", ".join(parts)


def _floors_text(floors: StepFloors | None) -> str:
    """The fusion floor and the eager traffic floor, and the gap fusion could close."""
    if floors is None or floors.fusion is None or floors.eager_traffic_ms is None:
        return ""
    f = floors.fusion
    return (
        f"floors: fusion floor {f.floor_ms:.2f} ms (the counted FLOPs at the attainable rates "
        f"{f.compute_ms:.2f} ms; compulsory traffic {_si(f.compulsory_bytes, 'B')} of {f.counted} "
        f"{f.traffic_ms:.2f} ms): no implementation beats it; eager traffic floor "
        f"{floors.eager_traffic_ms:.2f} ms (every eager operator's bytes): fusion "
        f"(torch.compile) could save up to {floors.fusion_gain_ms or 0.0:.2f} ms per step\n"
    )


def roofline_line(run: RunRecord, account: dict[str, Any] | None) -> str:
    """Work per step and attainable rates, the floors, and the achieved efficiency and MFU."""
    roof = run.roofline
    work = roof.get("work") or {}
    eff = roof.get("efficiency") or {}
    att = roof.get("attainable") or {}
    if not eff:
        why = roof.get("unavailable") or (roof.get("error") or "not measured")
        return f"roofline: not available ({why}); efficiency unknown\n"
    floors = step_floors(run, float(eff["step_ms"]))
    fusion = floors.fusion if floors is not None else None
    floor_name = "fusion floor" if fusion is not None else "eager traffic floor"
    floor_ms = fusion.floor_ms if fusion is not None else float(eff["roofline_ms"])
    share = min(1.0, floor_ms / eff["step_ms"]) if eff["step_ms"] else 0.0
    text = (
        f"roofline: {_si(float(work.get('flops_per_step') or 0), 'FLOP')} and "
        f"{_si(float(work.get('bytes_per_step') or 0), 'B')} per step counted; attainable "
        f"{_rates(att)}, {_si(float(att.get('bytes_per_s') or 0), 'B/s')} "
        f"({att.get('source', '?')})\n"
        + _floors_text(floors)
        + f"efficiency: the step takes {eff['step_ms']:.1f} ms, its {floor_name} "
        f"{floor_ms:.2f} ms: {share:.0%} of attainable (FLOP/s {eff['flops_share']:.0%}, "
        f"bandwidth {eff['bytes_share']:.0%})"
    )
    if floors is not None and floors.mfu is not None:
        text += (
            f"; MFU {floors.mfu:.0%} (counted FLOPs over the step, against the "
            f"{floors.mfu_peak_tflops:.1f} TFLOP/s dense {floors.mfu_dtype} datasheet peak)"
        )
    if account:
        state = "explained" if account.get("explained") else "not explained"
        text += (
            f"; {state}: {account['unexplained_ms']:.1f} ms per step "
            f"({account['unexplained_share']:.0%}) left over beyond "
            f"{1 / EXPLAINED_EFFICIENCY:.0f}x the eager traffic floor and what the findings claim"
        )
        if account.get("contention_ms"):
            text += (
                f" (and {account['contention_ms']:.1f} ms waiting for a CPU other processes held)"
            )
        if account.get("threads_wait_ms"):
            text += (
                f" (and {account['threads_wait_ms']:.1f} ms of operators whose intra-op "
                "threads waited for one another on the busy cores: "
                f"{account.get('threads_wait_from') or 'the thread probe'})"
            )
        assumed = account.get("assumed_compute") or {}
        if assumed.get("op"):
            text += (
                f"; {assumed['op']} ({float(assumed.get('ms') or 0):.1f} ms per step) taken as "
                "compute: its FLOPs could not be counted from its inputs"
            )
    return text + "\n"


_NUMS = 28
"""Columns the three numbers take with their indent and gaps (``  self ms incl ms share  ``)."""
_SITE, _FUNC = 28, 18
_UNDER_MIN = 20
"""The fewest columns 'under it' gets beside the row before it moves to lines of its own."""


def line_table_text(run: RunRecord, top: int = 10, width: int | None = None) -> str:
    """The per-line table: self and inclusive ms per step, share, what runs under each line.

    ``width``: the terminal's columns; the numbers always print whole, the line and function
    are shortened from the middle, and what runs under a line wraps at its spaces (beside the
    row when there is room, on lines of its own when not). None: one line per row, unwrapped
    (a log or a file)."""
    lines = run.lines
    out = io.StringIO()
    w = out.write
    if not lines.rows:
        w(f"where the time goes: not sampled ({lines.unavailable or 'no samples'})\n")
        return out.getvalue()
    cats = lines.categories
    total = sum(cats.values()) or 1.0
    w(
        fit(
            "where the time goes (your lines; sampled every "
            f"{lines.interval_s * 1e3:.0f} ms, {lines.samples} samples "
            f"over {lines.steps} steps): "
            + ", ".join(f"{c} {cats.get(c, 0.0) / total:.0%}" for c in _COLS if cats.get(c)),
            width,
        )
        + "\n"
    )
    wide = width is None or width >= _NUMS + _SITE + 1 + _FUNC + 1 + _UNDER_MIN
    nums = f"  {'self ms':>8} {'incl ms':>8} {'share':>6}  "
    if wide:
        w(f"{nums}{'line':<{_SITE}} {'function':<{_FUNC}} under it\n")
    else:
        w(f"{nums}line\n    function: under it\n")
    for r in sorted(lines.rows, key=lambda r: -r.self_ms)[:top]:
        w(_line_row(r, width, wide))
    return out.getvalue()


def _line_row(r: LineRow, width: int | None, wide: bool) -> str:
    """One row of the line table (and its code line) at ``width``."""
    from torchdoctor.report.layout import middle, wrap_words

    what = ", ".join(f"{c} {v:.1f}" for c, v in sorted(r.under.items(), key=lambda kv: -kv[1])[:3])
    if r.ops:
        what += " [" + ", ".join(name.replace("aten::", "") for name, _ in r.ops[:2]) + "]"
    nums = f"  {r.self_ms:8.2f} {r.inclusive_ms:8.2f} {r.self_share or 0.0:6.0%}  "
    site, func, code = short_site(r.site), r.function, r.code
    if width is None:
        text = f"{nums}{middle(site, _SITE):<{_SITE}} {middle(func, _FUNC):<{_FUNC}} {what}\n"
        return text + (f"{'':>{_NUMS + 2}}{middle(code, 90)}\n" if code else "")
    if wide:
        head = f"{nums}{middle(site, _SITE):<{_SITE}} {middle(func, _FUNC):<{_FUNC}} "
        parts = wrap_words(what, width - len(head)) if what else [""]
        if max(len(p) for p in parts) > width - len(head):  # a word held with its number
            parts = ["", *wrap_words(what, width - 4)]
            text = head.rstrip() + "\n" + "".join(f"    {p}\n" for p in parts[1:])
        else:
            text = (head + parts[0]).rstrip() + "\n"
            text += "".join(" " * len(head) + p + "\n" for p in parts[1:])
        return text + (f"{'':>{_NUMS + 2}}{middle(code, width - _NUMS - 2)}\n" if code else "")
    text = f"{nums}{middle(site, max(width - _NUMS, 8))}\n"
    name = middle(func, max(_FUNC, (width - 4) // 2))  # on a line of its own: more room
    body = f"{name}: {what}" if what else name
    text += "".join(f"    {p}\n" for p in wrap_words(body, width - 4))
    return text + (f"      {middle(code, width - 6)}\n" if code else "")


def experiments_text(run: RunRecord) -> str:
    """check's own measurements after the window (the toggles' extra steps, the thread probe,
    what compiled during them): measured, skipped or failed, each with its reason."""
    rows = []
    for e in run.experiments:
        what, base, changed = e.toggle or e.id, e.baseline_median_ms, e.changed_median_ms
        if e.skipped:
            rows.append(f"{what}: not measured: {e.skipped}")
        elif e.ratio is not None and base is not None and changed is not None:
            bad = len(e.rejected_pairs)
            dropped = f", {bad} rejected ({e.rejected_pairs[0]})" if bad else ""
            rows.append(
                f"{what}: {changed:.1f} ms per step against {base:.1f} ms "
                f"({len(e.pair_ratios)} pairs{dropped})"
            )
        elif e.error:
            rows.append(f"{what}: failed: {e.error}")
    probe = run.cpu.get("thread_probe") or {}
    if isinstance(probe, dict) and (probe.get("failed") or probe.get("error")):
        rows.append(f"thread probe: failed: {probe.get('failed') or probe.get('error')}")
    ours = run.compile.ours
    if ours.get("compiles"):
        rows.append(
            f"{ours['compiles']} compile(s), {float(ours.get('compile_s') or 0):.1f} s, during "
            "them: check's, not counted as the script's"
        )
    if not rows:
        return ""
    head = "check's own measurements (extra steps after the measured ones, never the script's):\n"
    return head + "".join(f"  {r}\n" for r in rows)


def account_text(
    doc: dict[str, Any], run: RunRecord, top: int = 10, width: int | None = None
) -> str:
    """Both parts, then check's own measurements, for the end of the check report; laid out to
    ``width`` columns (None: lines as they are, for a log or a file)."""
    if (doc.get("measurement") or {}).get("failure"):
        return fit(experiments_text(run), width)
    return (
        fit(roofline_line(run, doc.get("account")), width)
        + line_table_text(run, top, width)
        + fit(experiments_text(run), width)
    )
