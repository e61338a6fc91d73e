"""The verdict's first words for a graph-capture trace and for an inference engine's steps."""

from __future__ import annotations

from torchdoctor.analysis.bundle import TraceAnalysis


def capture_verdict(a: TraceAnalysis) -> str:
    """A capture trace's whole verdict: what it holds and what it cost, never an idle share."""
    g = a.graphs
    assert g is not None
    labels = ", ".join(g.capture_labels)
    what = f" ({labels})" if labels else ""
    n = len(g.captures)
    return (
        f"Graph capture (start-up), not a serving step: {n} CUDA/HIP graph{'s' * (n != 1)}"
        f"{what} captured in {_ms(g.capture_ms)} ms ({g.capture_ms / n:.2f} ms per graph, "
        f"{_ms(g.capture_span_ms)} ms from the first to the last). Profile replay steps to see "
        "how the engine serves."
    )


def _ms(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def serving_head(a: TraceAnalysis) -> str:
    """ "SGLang decode (bs 32)" / "vLLM mixed prefill+decode (46 requests, 8192 tokens)"..."""
    s = a.serving
    assert s is not None
    kinds = []
    for kind, k in s.by_kind.items():
        sizes = []
        if k.mean_batch_size is not None:
            sizes.append(f"batch {k.mean_batch_size:.0f}")
        if k.mean_tokens is not None and kind != "decode":
            sizes.append(f"{k.mean_tokens:.0f} tokens")
        calls = a.steps.source in ("forward", "profiler-step")  # check's model-call steps
        unknown = "model-call steps" if calls else "inference steps"
        name = {"mixed": "prefill+decode", "unknown": unknown}.get(kind, kind)
        kinds.append(name + (f" ({', '.join(sizes)})" if sizes else ""))
    engine = "" if s.engine == "unknown" else f"{s.engine} "
    return f"{engine}{'; '.join(kinds)}: "


def serving_tail(a: TraceAnalysis) -> str:
    """Tokens per second, and how much of the GPU time ran inside graphs."""
    s, g = a.serving, a.graphs
    parts = []
    if s is not None:
        rates = [
            f"{k.generated_tokens_per_s:,.0f} generated tokens/s"
            if kind == "decode" and k.generated_tokens_per_s
            else f"{k.tokens_per_s:,.0f} tokens/s"
            for kind, k in s.by_kind.items()
            if k.tokens_per_s
        ]
        parts.extend(rates[:2])
    if g is not None and g.coverage is not None:
        n = g.launch_count
        parts.append(f"{g.coverage:.0%} of GPU time in {n} graph replay{'s' * (n != 1)}")
    return f"; {', '.join(parts)}" if parts else ""
