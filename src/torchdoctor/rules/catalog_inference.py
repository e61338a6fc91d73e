"""Registry entries of the findings about inference engines and CUDA/HIP graphs (traces)."""

from __future__ import annotations

from torchdoctor.rules import inference_fixes as ifx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.fixes import DOCS
from torchdoctor.rules.spec import FindingSpec, SeverityPolicy

_GRAPHS = f"{DOCS}/notes/cuda.html#cuda-graphs"

INFERENCE_SPECS: tuple[FindingSpec, ...] = (
    FindingSpec(
        id="graph-capture",
        label="graph capture (start-up)",
        title="CUDA-graph capture: the trace records the capture of {n} graphs{what}: a one-off "
        "start-up cost of {ms:.1f} ms, not a steady-state step",
        sources=("trace",),
        severity=SeverityPolicy(fixed="info"),
        threshold=None,
        fix=ifx.profile_replay_fix,
        explanation="While a stream captures, launches are recorded into the graph, not run: "
        "the GPU is idle by design and the CPU time is the capture's. The trace says how long "
        "start-up capture takes, not how fast the engine serves; that needs replay steps.",
        doc_url=_GRAPHS,
    ),
    FindingSpec(
        id="graph-kernels-not-recorded",
        label="graph kernels missing from the trace",
        title="Graph kernels not recorded: {n} graph launches in the trace, {missing} without "
        "any of their kernels; {ms:.1f} ms per step of GPU work the trace cannot show",
        sources=("trace",),
        severity=SeverityPolicy(fixed="warning", risk=True),
        threshold=None,
        fix=ifx.record_graph_kernels_fix,
        explanation="The GPU time inside those replays was not recorded, so busy and idle "
        "shares cover the eager kernels only; the time behind the replays is reported as not "
        "recorded, never as idle.",
        doc_url=_GRAPHS,
    ),
    FindingSpec(
        id="eager-decode-launch-bound",
        label="eager decode (launch bound)",
        title="Eager {what} is launch bound: the GPU waits {ms:.1f} ms per step ({share:.0%}) "
        "for the CPU to launch {kernels:.0f} kernels; no CUDA graph replayed",
        sources=("trace",),
        severity=SeverityPolicy(th.HOST_WARN, th.HOST_CRITICAL),
        threshold=th.HOST_WARN,
        fix=ifx.eager_decode_fix,
        explanation="A decode step runs the whole model for one token per request: hundreds of "
        "short kernels, each paying Python, dispatcher and launch cost. Replaying the step as a "
        "CUDA graph issues them with one launch.",
        doc_url=_GRAPHS,
        knobs=("compile",),
    ),
    FindingSpec(
        id="low-graph-coverage",
        label="work outside the graphs",
        title="Graph coverage {coverage:.0%}: {eager_ms:.1f} ms per step of device work runs "
        "outside the graphs ({ops})",
        sources=("trace",),
        severity=SeverityPolicy(th.HOST_WARN, th.HOST_CRITICAL),
        threshold=th.GRAPH_COVERAGE_WARN,
        fix=ifx.graph_coverage_fix,
        explanation="Kernels outside a graph are launched one by one; when the GPU waits for "
        "those launches, the step pays for them. Piecewise graphs (vLLM's default) keep "
        "attention eager on purpose, because its shapes change with the batch.",
        doc_url=_GRAPHS,
    ),
    FindingSpec(
        id="host-work-between-replays",
        label="host work between graph replays",
        title="Host work between graph replays: the GPU waits {ms:.1f} ms per step ({share:.0%}) "
        "for the engine's CPU work (scheduling, input preparation, sampling)",
        sources=("trace",),
        severity=SeverityPolicy(th.HOST_WARN, th.HOST_CRITICAL),
        threshold=th.HOST_WARN,
        fix=ifx.host_between_replays_fix,
        explanation="With the model in graphs, what is left on the CPU each iteration (the "
        "scheduler, building the batch's inputs, sampling, detokenising) runs while the GPU "
        "has nothing queued, unless the engine overlaps it with the previous iteration.",
        doc_url=_GRAPHS,
    ),
    FindingSpec(
        id="sync-d2h-per-token",
        label="a blocking device-to-host copy per step",
        title="Blocking device-to-host copy per decode step: {per_step:.4g} per step hold the "
        "CPU; the GPU then idles {ms:.2f} ms per step ({share:.0%}) before the next launch",
        sources=("trace",),
        severity=SeverityPolicy(th.SYNC_WARN, th.SYNC_CRITICAL),
        threshold=th.SYNC_WARN,
        fix=ifx.sync_d2h_fix,
        explanation="Reading sampled tokens back with a blocking copy (.item(), .tolist(), "
        ".cpu()) waits for all queued GPU work, so the CPU cannot queue the next step ahead: "
        "the GPU idles for the host's per-token work every step.",
        doc_url=f"{DOCS}/notes/cuda.html#asynchronous-execution",
    ),
    FindingSpec(
        id="prefill-chunk-size",
        label="prefill chunk size",
        title="Prefill chunk {what}: {tokens} tokens per step, {ms:.1f} ms per step",
        sources=("trace",),
        severity=SeverityPolicy(fixed="info"),
        threshold=th.PREFILL_STEP_MAX_MS,
        fix=ifx.prefill_chunk_fix,
        explanation="A long prefill step delays every decode request batched with it or queued "
        "behind it (inter-token latency); a very short one is dominated by the fixed cost of a "
        "step. Chunked prefill sets the tokens per step between the two.",
        doc_url="https://docs.vllm.ai/en/latest/configuration/optimization.html",
    ),
    FindingSpec(
        id="memory-bound-decode",
        label="decode below memory bandwidth",
        title="Decode runs at {share:.0%} of memory bandwidth: its GEMM/attention kernels move "
        "{gb:.2f} GB per step at {gbps:.0f} GB/s (peak {peak:.0f} GB/s)",
        sources=("trace",),
        probe="kernel",
        severity=SeverityPolicy(),
        threshold=th.DECODE_BANDWIDTH_TARGET,
        fix=ifx.memory_bound_decode_fix,
        explanation="Decode reads every weight and the KV cache once per step for one token "
        "per request, so it is limited by memory bandwidth, not FLOPs; MFU says little. The "
        "bytes come from the recorded shapes (each tensor read once, the output written once).",
        doc_url="https://docs.vllm.ai/en/latest/configuration/optimization.html",
    ),
)
