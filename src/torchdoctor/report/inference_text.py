"""The terminal report's inference sections: engine steps by kind, graphs, capture, bandwidth."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from torchdoctor.analysis.bundle import TraceAnalysis


def render_capture(con: Console, a: TraceAnalysis) -> None:
    """What a capture trace holds, per graph, instead of an idle breakdown."""
    from torchdoctor.report.layout import Column, TableText, print_table

    g = a.graphs
    assert g is not None
    heads = ("graph", "start ms", "recording ms", "instantiate ms", "launches")
    columns = (*(Column(h) for h in heads), Column("annotation", right=False, flex="shorten"))
    shown = g.captures if len(g.captures) <= 12 else (*g.captures[:6], *g.captures[-6:])
    rows = []
    for c in shown:
        i = g.captures.index(c) + 1
        rows.append(
            (
                str(i),
                f"{c.start_us / 1e3:.2f}",
                f"{c.record_ms:.3f}",
                f"{c.instantiate_ms:.3f}",
                str(c.recorded_launches),
                c.annotation,
            )
        )
    title = f"Graph capture ({len(g.captures)} graphs)"
    print_table(con, TableText(columns, tuple(rows), title=title))
    con.print(
        f"  total {g.capture_ms:.2f} ms; first to last capture {g.capture_span_ms:.2f} ms "
        "(with the eager warm-up runs between them)\n"
    )


def render_serving(con: Console, a: TraceAnalysis) -> None:
    """Per-kind step table, graph coverage and GEMM/attention bandwidth."""
    from rich.markup import escape

    from torchdoctor.report.layout import Column, TableText, print_table

    s = a.serving
    if s is None:
        return
    engine = "" if s.engine == "unknown" else f" ({s.engine})"
    heads = ("steps", "ms/step", "batch", "tokens/step", "tokens/s", "GPU busy", "host ms")
    columns = (Column("kind", right=False, flex="shorten"), *(Column(h) for h in heads))
    rows = [
        (
            kind,
            str(k.steps),
            f"{k.mean_step_ms:.2f}",
            _num(k.mean_batch_size),
            _num(k.mean_tokens),
            _num(k.tokens_per_s),
            f"{k.gpu_busy_share:.0%}",
            f"{k.host_wait_ms:.2f}",
        )
        for kind, k in s.by_kind.items()
    ]
    title = f"Engine steps{engine} (ms per step accounted for, means by kind)"
    print_table(con, TableText(columns, tuple(rows), title=title))
    if s.between_steps_ms:
        mean = sum(s.between_steps_ms) / len(s.between_steps_ms)
        con.print(f"  CPU time between iterations: {mean:.2f} ms mean")
    g = a.graphs
    if g is not None and g.coverage is not None:
        outside = ", ".join(f"{o.name} {o.gpu_ms:.2f} ms" for o in g.eager_ops[:3])
        con.print(
            escape(
                f"  graphs: {g.launch_count} replay{'s' * (g.launch_count != 1)}, "
                f"{g.graph_activity_count} activities, "
                f"{g.coverage:.0%} of GPU time; outside them: {outside or 'nothing'}"
            )
        )
    for kind, bw in s.bandwidth.items():
        if bw.covered_share < 0.05:  # a few operators' shapes say little about the step
            continue
        con.print(f"  {kind} GEMM/attention ({bw.covered_share:.0%} of kernel time): {_bound(bw)}")
    con.print()


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _bound(bw: Any) -> str:
    """Memory- or compute-bound by the roofline, with the rate against its peak."""
    mem = f"{bw.bytes_moved / 1e9:.2f} GB at {bw.achieved_gb_per_s:.0f} GB/s"
    if bw.share_of_peak is not None:
        mem += f" ({bw.share_of_peak:.0%} of {bw.peak_gb_per_s:.0f} GB/s)"
    flop = f"{bw.achieved_tflops:.1f} TFLOP/s"
    if bw.peak_tflops:
        flop += f" ({bw.achieved_tflops / bw.peak_tflops:.0%} of {bw.peak_tflops:.0f})"
    ai = f"{bw.arithmetic_intensity:.0f} FLOP/byte"
    if bw.ridge_point is None:
        return f"{mem}, {flop}, {ai}"
    if bw.arithmetic_intensity >= bw.ridge_point:
        return f"compute-bound ({ai}, ridge {bw.ridge_point:.0f}): {flop}"
    return f"memory-bound ({ai}, ridge {bw.ridge_point:.0f}): {mem}"
