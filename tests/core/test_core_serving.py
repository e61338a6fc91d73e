"""The four MI300X serving traces (TraceLens test data): what each trace is, exact numbers.

Every expected number below was worked out from the raw JSON with the json module alone
(no torchdoctor code), as follows, times relative to the trace's first complete event:

* SGLang decode: the step is ``step[DECODE bs=32]`` (203.785 µs) to the end of the last device
  activity its CPU range launched (the graph's last kernel, 473 759.305 µs), 473.556 ms.
  The first activity on stream 3 (``resolve_future_token_ids_kernel``) starts at 463 380.240 µs,
  queued since 123 µs behind an event recorded before the trace: 463.176 ms not recorded,
  10.379 ms accounted for. The one ``hipGraphLaunch`` (correlation 92178) ran 544 kernels,
  9.656 ms; 0.055 ms of other device work in the window; union of device activity 9.706 ms.
* vLLM replay: the ``execute_8192_...`` range (0 µs) to the last kernel's end (307 697.688 µs);
  the first device activity starts at 151 231.271 µs, launched at 2 211.770 µs with nothing
  recorded before it. 25 ``hipGraphLaunch`` ran 361 activities, 149.920 ms; 6.166 ms eager
  (5.147 ms of it ``kernel_unified_attention_2d``); union 156.086 ms of 156.466 ms accounted.
* SGLang prefill: ``step[EXTEND bs=15 toks=15360]`` (493 641.516 µs) to 987 367.474 µs,
  493.633 ms, 492.688 ms of it busy. Its 145 ``aten::mm`` calls (Input Dims [M, K], [K, N], bf16)
  move (MK + KN + MN)·2 bytes = 85.354 GB and do 2MKN = 213.393 TFLOP in 420.306 ms of kernels.
* vLLM capture: 25 ``hipStreamBeginCapture`` ... ``hipGraphInstantiateWithFlags`` windows, summed
  47.099 ms, 54.869 ms from the first begin to the last instantiate's end.
"""

from __future__ import annotations

import pytest

from tests.conftest import corpus_report
from torchdoctor.report.model import Report

GRAPH_ADVICE = ("torch.compile", "reduce-overhead", "torch.cuda.graphs", "CUDA graphs (mode")


def report(name: str) -> Report:
    return corpus_report(name)  # made once per test run, read by every corpus test


def _ids(r: Report) -> list[str]:
    return [f.id for f in r.findings]


def test_sglang_decode_is_a_graph_replayed_decode_step() -> None:
    r = report("mi300x_sglang_qwen3_8b_decode")
    a = r.analysis
    assert a.steps.source == "server-step" and a.steps.labels == ("step[DECODE bs=32]",)
    assert a.total.step_ms == pytest.approx(473.5555, abs=1e-3)
    assert a.not_recorded_ms == pytest.approx(463.1765, abs=1e-3)
    assert a.mean_step_ms == pytest.approx(10.3791, abs=1e-3)
    assert a.total.gpu_busy_ms == pytest.approx(9.7062, abs=1e-3)
    assert a.gpu_busy_share == pytest.approx(9.7062 / 10.3791, abs=1e-4)
    g = a.graphs
    assert (g.launch_count, g.graph_activity_count) == (1, 544)
    assert g.graph_gpu_ms == pytest.approx(9.6564, abs=1e-3)
    assert g.eager_gpu_ms == pytest.approx(0.0555, abs=1e-3)
    step = a.serving.steps[0]
    assert (step.kind, step.batch_size, step.decode_kv_tokens) == ("decode", 32, 32785)
    assert a.serving.by_kind["decode"].generated_tokens_per_s == pytest.approx(3083.13, abs=0.05)
    assert a.serving.engine == "SGLang"
    assert r.verdict.startswith("SGLang decode (batch 32): 1 step, 10.4 ms per step")
    assert "GPU busy 94%" in r.verdict and "99% of GPU time in 1 graph replay" in r.verdict
    # before: "GPU busy 2%", synchronous-copies 98% and a 463 ms dependency wait (critical)
    assert "synchronous-copies" not in _ids(r) and "dependency-waits" not in [
        f.id for f in r.findings if f.severity != "info"
    ]
    top = r.findings[0]
    assert top.id == "sync-d2h-per-token" and top.severity == "warning"
    assert top.where[0].endswith("cuda_graph_runner.py(276): populate_from_forward_batch")
    assert "overlap scheduler already on" in top.fix


def test_vllm_replay_is_busy_while_its_piecewise_graphs_run() -> None:
    r = report("mi300x_vllm_piecewise_graph_replay")
    a = r.analysis
    assert a.steps.source == "server-step"
    assert a.total.step_ms == pytest.approx(307.6977, abs=1e-3)
    assert a.not_recorded_ms == pytest.approx(151.2313, abs=1e-3)
    assert a.mean_step_ms == pytest.approx(156.4664, abs=1e-3)
    assert a.gpu_busy_share == pytest.approx(156.0858 / 156.4664, abs=1e-4)
    g = a.graphs
    assert (g.launch_count, g.graph_activity_count, g.launches_without_kernels) == (25, 361, 0)
    assert g.coverage == pytest.approx(149.9198 / (149.9198 + 6.1661), abs=1e-4)
    assert g.eager_ops[0].name == "vllm::unified_attention_with_output"
    assert g.eager_ops[0].gpu_ms == pytest.approx(5.1469, abs=1e-3)
    s = a.serving.steps[0]
    assert (s.kind, s.prefill_requests, s.decode_requests, s.tokens) == ("mixed", 9, 37, 8192)
    assert a.serving.by_kind["mixed"].tokens_per_s == pytest.approx(52356.3, abs=0.5)
    # before: "GPU busy 51%", "waiting on a dependency 48%, cause not in the trace"
    assert "GPU busy 100%" in r.verdict and "96% of GPU time in 25 graph replays" in r.verdict
    assert "dependency-waits" not in _ids(r)
    chunk = next(f for f in r.findings if f.id == "prefill-chunk-size")
    assert chunk.evidence["suggested_tokens"] == 4096  # 8192 * 100 / 156.5 = 5235 -> 4096
    assert "max_num_batched_tokens=4096" in chunk.fix


def test_sglang_prefill_is_compute_bound() -> None:
    r = report("mi300x_sglang_qwen3_8b_prefill_decode")
    a = r.analysis
    assert a.mean_step_ms == pytest.approx(493.6332, abs=1e-3)
    assert a.not_recorded_ms == 0.0
    assert a.serving.steps[0].kind == "prefill"
    assert a.serving.by_kind["prefill"].tokens_per_s == pytest.approx(31116.2, abs=0.5)
    bw = a.serving.bandwidth["prefill"]
    assert bw.ops == 145
    assert bw.bytes_moved == pytest.approx(85.35352448e9, rel=1e-9)
    assert bw.flops == pytest.approx(213.39264516096e12, rel=1e-9)
    assert bw.kernel_ms == pytest.approx(420.3057, abs=1e-3)
    assert bw.arithmetic_intensity > bw.ridge_point  # 2500 FLOP/byte against 1307 / 5.3 = 247
    # before: "GPU busy 50%", synchronous copies 50% (a wait that precedes the step)
    assert "GPU busy 100%" in r.verdict and "31,116 tokens/s" in r.verdict
    assert not [f for f in r.findings if f.severity != "info"]
    assert (
        next(f for f in r.findings if f.id == "prefill-chunk-size").evidence["suggested_tokens"]
        == 2048
    )  # 15360 * 100 / 493.6 = 3111 -> 2048


def test_vllm_capture_is_start_up_not_a_host_bound_step() -> None:
    r = report("mi300x_vllm_piecewise_graph_capture")
    g = r.analysis.graphs
    assert g.is_capture_trace and len(g.captures) == 25
    assert g.capture_ms == pytest.approx(47.0993, abs=1e-3)
    assert g.capture_span_ms == pytest.approx(54.8692, abs=1e-3)
    assert g.captures[0].cost_ms == pytest.approx(1.0533, abs=1e-3)
    assert g.capture_labels == ("8192 PIECEWISE",)
    # before: "GPU busy 0%", sync stalls 71%, host bound 28% with torch.compile advice
    assert r.verdict.startswith("Graph capture (start-up), not a serving step: 25 CUDA/HIP")
    assert "GPU busy" not in r.verdict
    assert _ids(r) == ["graph-capture"]
    assert "VLLM_TORCH_PROFILER_DIR" in r.findings[0].fix


@pytest.mark.parametrize(
    "name",
    [
        "mi300x_sglang_qwen3_8b_decode",
        "mi300x_vllm_piecewise_graph_replay",
        "mi300x_vllm_piecewise_graph_capture",
        "v100_recsys_train_rank1",  # a training loop that replays CUDA graphs
    ],
)
def test_no_compile_or_graph_advice_to_a_trace_with_graphs(name: str) -> None:
    for f in report(name).findings:
        assert not any(s in f.fix for s in GRAPH_ADVICE), (f.id, f.fix)


def test_serving_report_text_and_json() -> None:
    r = report("mi300x_sglang_qwen3_8b_decode")
    from torchdoctor.api import Report as ApiReport

    text = ApiReport(r).text(width=140)
    assert "Engine steps (SGLang)" in text and "accounted for" in text
    assert "GPU work not in the trace" in text
    d = ApiReport(r).to_dict()
    assert d["serving"]["by_kind"]["decode"]["steps"] == 1
    assert d["graphs"]["graph_activity_count"] == 544
    assert report("mi300x_vllm_piecewise_graph_capture").analysis.serving is None
