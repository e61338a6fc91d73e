"""Fix builders of the inference findings, in the terms of the engine that wrote the trace.

Each takes the engine (``analysis/serving.py``'s ``Engine``: "vLLM", "SGLang", "transformers",
"TensorRT-LLM" or "unknown") and the numbers the rule measured, and returns text to paste.
"""

from __future__ import annotations


def profile_replay_fix(engine: str = "unknown") -> str:
    """How to profile serving iterations instead of start-up."""
    if engine == "vLLM":
        return (
            "# profile serving iterations, after start-up has captured the graphs:\n"
            "VLLM_TORCH_PROFILER_DIR=/tmp/prof vllm serve MODEL  # then, under load:\n"
            "curl -X POST localhost:8000/start_profile; sleep 2; "
            "curl -X POST localhost:8000/stop_profile"
        )
    if engine == "SGLang":
        return (
            "# profile serving iterations, after start-up has captured the graphs:\n"
            "SGLANG_TORCH_PROFILER_DIR=/tmp/prof python -m sglang.launch_server ...  # then:\n"
            "curl -X POST localhost:30000/start_profile; sleep 2; "
            "curl -X POST localhost:30000/stop_profile"
        )
    return (
        "# start the profiler after the graphs are captured (warm-up steps first):\n"
        "prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=5, warmup=2, "
        "active=5))"
    )


def record_graph_kernels_fix(engine: str = "unknown") -> str:
    """How to get the kernels inside graph replays into a trace (or around them)."""
    off = {
        "vLLM": "LLM(..., enforce_eager=True)  # or: vllm serve --enforce-eager",
        "SGLang": "python -m sglang.launch_server ... --disable-cuda-graph",
    }.get(engine, 'torch.compile(model, mode="max-autotune-no-cudagraphs")  # no graphs')
    return (
        "# the graph launches are in the trace, their kernels are not. Record them by starting\n"
        "# the profiler (with CUDA activity) before the graphs are captured, in the same process;\n"
        "# or compare with one run without graphs, which records every kernel:\n" + off
    )


def eager_decode_fix(engine: str = "unknown", batch_size: int | None = None) -> str:
    """Replay the decode step as a CUDA graph, the way the engine does it."""
    bs = batch_size or 32
    if engine == "vLLM":
        return (
            "LLM(model, enforce_eager=False)  # the default: decode replays CUDA graphs\n"
            f'# and capture your batch sizes: compilation_config={{"cudagraph_capture_sizes": '
            f"[1, 2, 4, 8, 16, {bs}]}}"
        )
    if engine == "SGLang":
        return (
            "# drop --disable-cuda-graph, and capture up to your batch size:\n"
            f"python -m sglang.launch_server ... --cuda-graph-max-bs {max(bs, 8)}"
        )
    if engine == "transformers":
        return (
            'model.generation_config.cache_implementation = "static"  # fixed-shape KV cache\n'
            'model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)'
        )
    return (
        'decode_step = torch.compile(decode_step, mode="reduce-overhead")  # CUDA graph replay\n'
        "# graphs need fixed shapes: a preallocated (static) KV cache and a fixed batch size"
    )


def graph_coverage_fix(engine: str = "unknown", eager_attention: bool = False) -> str:
    """Bring the eager work inside the graphs, or say why it is outside."""
    if engine == "vLLM":
        return (
            "# piecewise graphs leave attention eager; full graphs for decode batches\n"
            '# (vLLM 0.10.2 and later): compilation_config={"cudagraph_mode": "FULL_AND_PIECEWISE"}'
        )
    if engine == "SGLang":
        return "# batches above the largest captured size run eagerly: raise --cuda-graph-max-bs"
    if eager_attention:
        return (
            "# attention runs outside the graphs: capture it in the same graph where its\n"
            "# shapes can be fixed (a static, preallocated KV cache and padded batch sizes)"
        )
    return (
        "# capture the operators listed in the evidence in the same graph as the rest of the\n"
        "# step where their shapes are fixed; collectives and copies to the host can stay out"
    )


def host_between_replays_fix(engine: str = "unknown") -> str:
    """Overlap the engine's host work (scheduling, sampling, input prep) with the GPU."""
    if engine == "SGLang":
        return (
            "# keep the overlap scheduler on (the default; --disable-overlap-schedule turns it\n"
            "# off) so the next batch is scheduled while this one runs; check --enable-metrics"
        )
    if engine == "vLLM":
        return "vllm serve MODEL --async-scheduling  # schedule step N+1 while step N runs"
    return (
        "# prepare step N+1 while the graph of step N runs: inputs from pinned memory with\n"
        "static_input.copy_(next_input, non_blocking=True)\n"
        "# sample on the GPU and read the tokens back one step late (no sync before replay())"
    )


def sync_d2h_fix(engine: str = "unknown", frame: str = "", overlap: bool = False) -> str:
    """Keep sampled tokens on the device; read them back without blocking the next launch.
    ``overlap``: the engine's overlap scheduling is already on (seen in the trace)."""
    where = f"# the copy is made at {frame}\n" if frame else ""
    if engine in ("SGLang", "vLLM") and overlap:
        return where + (
            "# it is the engine's own, with its overlap scheduler already on: nothing in your\n"
            "# code to change. Keep it on, and report the stall upstream with this trace"
        )
    if engine in ("SGLang", "vLLM"):
        return where + (
            "# it is the engine's own: turn its overlap scheduling on so it waits on the\n"
            "# previous step's GPU work, not on this one's (SGLang: do not pass\n"
            "# --disable-overlap-schedule; vLLM: vllm serve MODEL --async-scheduling)"
        )
    return where + (
        "next_token = logits[:, -1].argmax(-1)  # stays on the GPU: no .item()/.tolist()\n"
        "tokens.append(next_token)\n"
        "host_copy.copy_(next_token, non_blocking=True); ready.record()  # pinned host_copy\n"
        "# read host_copy after the next step is queued (ready.synchronize() there)"
    )


def prefill_chunk_fix(engine: str = "unknown", tokens: int = 4096, too_large: bool = True) -> str:
    """The engine's chunked-prefill size, set to ``tokens``."""
    verb = "cap" if too_large else "raise"
    if engine == "SGLang":
        return f"python -m sglang.launch_server ... --chunked-prefill-size {tokens}  # {verb} it"
    if engine == "vLLM":
        return (
            f"LLM(model, enable_chunked_prefill=True, max_num_batched_tokens={tokens})  # {verb}\n"
            f"# server: vllm serve MODEL --max-num-batched-tokens {tokens}"
        )
    return f"# {verb} the prompt chunk to {tokens} tokens per forward (chunked prefill)"


def memory_bound_decode_fix(engine: str = "unknown") -> str:
    """Decode streams weights and KV cache each step: more tokens per read, fewer bytes."""
    more = {
        "SGLang": "--max-running-requests N  # more requests per decode step",
        "vLLM": "LLM(model, max_num_seqs=N)  # more requests per decode step",
    }.get(engine, "# batch more requests (sequences) into each decode step")
    return (
        more + "\n# and move fewer bytes per token: fp8 weights and KV cache (quantisation), "
        "grouped-query attention kernels"
    )


def graphs_already_fix(graph_launches: int) -> str:
    """For generic host findings on a trace that already replays graphs: no compile/graph
    advice, the launches left are outside the graphs."""
    return (
        f"# the step already replays CUDA/HIP graphs ({graph_launches} launches): compile or\n"
        "# graphs will not remove these gaps. They are the launches outside the graphs (see\n"
        "# the graph coverage) and the host's work between replays: overlap that work with\n"
        "# the GPU (prepare inputs and sample one step ahead, no blocking copy before replay)"
    )
