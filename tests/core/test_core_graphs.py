"""Synthetic CUDA-graph and serving traces: capture, replay, kernels not recorded, work queued
from before the trace, engine steps and the inference findings.

Each trace is built so the answer is known by construction; the expected numbers are worked out
by hand in the comments from the event times (µs), not taken from the code under test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.core.synth import CPU_PID, CPU_TID, annotation, cpu_op, kernel, runtime
from tests.core.synth import write_trace as _write
from torchdoctor.commands.analyze.trace import analyze_path

GRAPH_ADVICE = ("torch.compile", "reduce-overhead", "torch.cuda.graphs")
H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0}]


def write(path: Path, events: list[dict[str, Any]], devices: Any = None) -> Path:
    return _write(path, events, devices=devices or H100)


def pyframe(name: str, ts: float, dur: float) -> dict[str, Any]:
    ev = {"ph": "X", "cat": "python_function", "name": name, "pid": CPU_PID, "tid": CPU_TID}
    return {**ev, "ts": ts, "dur": dur}


def copy(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return kernel(name, ts, dur, corr, cat="gpu_memcpy")


def _ids(r: Any, serious: bool = False) -> list[str]:
    return [f.id for f in r.findings if not serious or f.severity != "info"]


def _no_graph_advice(r: Any) -> None:
    for f in r.findings:
        assert not any(s in f.fix for s in GRAPH_ADVICE), (f.id, f.fix)


# -- capture ------------------------------------------------------------------------------------
def _capture_trace() -> list[dict[str, Any]]:
    """Three graphs captured at 100, 700, 1300: begin (5 µs), three launches recorded, end at
    +100 (10 µs), instantiate at +120 for 200 µs. Each costs 320 µs; 0.96 ms in all; the first
    begins at 100 and the last instantiate ends at 1620: a 1.52 ms span."""
    ev = [annotation("capture_16_FULL", 0, 2000), *_warmup_kernel()]
    for i in range(3):
        b = 100 + 600 * i
        c = 10 * (i + 1)
        ev += [runtime("cudaStreamBeginCapture", b, 5, corr=c)]
        ev += [runtime("cudaLaunchKernel", b + 10 * j, 5, corr=c + j) for j in (1, 2, 3)]
        ev += [runtime("cudaStreamEndCapture", b + 100, 10, corr=c + 4)]
        ev += [runtime("cudaGraphInstantiate", b + 120, 200, corr=c + 5)]
    ev += [runtime("cudaDeviceSynchronize", 1700, 200, corr=99)]
    return ev


def _warmup_kernel() -> list[dict[str, Any]]:
    return [runtime("cudaLaunchKernel", 50, 5, corr=1), kernel("warmup_gemm", 60, 10, corr=1)]


def test_capture_is_reported_as_start_up_with_cost_per_graph(tmp_path: Path) -> None:
    r = analyze_path(write(tmp_path / "cap.json", _capture_trace()))
    g = r.analysis.graphs
    assert g.is_capture_trace and len(g.captures) == 3
    assert [c.cost_ms for c in g.captures] == pytest.approx([0.32] * 3)
    assert [c.record_ms for c in g.captures] == pytest.approx([0.11] * 3)
    assert [c.recorded_launches for c in g.captures] == [3, 3, 3]
    assert g.capture_ms == pytest.approx(0.96) and g.capture_span_ms == pytest.approx(1.52)
    assert r.verdict.startswith(
        "Graph capture (start-up), not a serving step: 3 CUDA/HIP graphs (16 FULL) captured in "
        "0.96 ms (0.32 ms per graph, 1.52 ms from the first to the last)"
    )
    assert _ids(r) == ["graph-capture"]  # before: host-bound and sync-stalls, critical
    _no_graph_advice(r)


# -- replay -------------------------------------------------------------------------------------
def _replay_step(t0: float, c: int, graph_kernels: bool = True, corr: bool = True) -> list[Any]:
    """``step[DECODE bs=4]`` (900 µs of CPU): an input copy launched at +20 (runs 30-35), a graph
    launched at +300 running two kernels 310-610 and 610-700, an eager attention kernel launched
    at +700 (runs 710-760). The next step begins at +1000; the last one ends with its last
    recorded event, the attention kernel (+760)."""
    k = c + 2 if corr else -1
    ev = [
        annotation("step[DECODE bs=4]", t0, 900),
        cpu_op("aten::copy_", t0 + 10, 40),
        runtime("cudaMemcpyAsync", t0 + 20, 5, corr=c + 1),
        copy("Memcpy HtoD (Pinned -> Device)", t0 + 30, 5, corr=c + 1),
        runtime("cudaGraphLaunch", t0 + 300, 20, corr=c + 2),
        runtime("cudaLaunchKernel", t0 + 700, 5, corr=c + 3),
        kernel("attention_kernel", t0 + 710, 50, corr=c + 3),
    ]
    if graph_kernels:
        ev += [
            kernel("graph_gemm", t0 + 310, 300, corr=k),
            kernel("graph_norm", t0 + 610, 90, corr=k),
        ]
    for e in ev:
        if e["cat"] == "kernel" and not corr and e["name"].startswith("graph_"):
            del e["args"]["correlation"]
    return ev


def _replay(n: int = 3, **kw: Any) -> list[dict[str, Any]]:
    return [e for i in range(n) for e in _replay_step(1000.0 * i, 100 * i, **kw)]


def test_replayed_kernels_are_attributed_and_host_work_between_replays_found(
    tmp_path: Path,
) -> None:
    r = analyze_path(write(tmp_path / "replay.json", _replay()))
    a = r.analysis
    assert a.steps.source == "server-step" and len(a.steps) == 3
    g = a.graphs
    assert (g.launch_count, g.graph_activity_count, g.by_stream_window) == (3, 6, 0)
    # graph: 390 µs a step; eager: 50 (attention) + 5 (copy): 1170 / (1170 + 165)
    assert g.coverage == pytest.approx(1170 / 1335)
    # no External id on the copy's launch: named by the copy itself
    assert [(o.name, o.activities) for o in g.eager_ops] == [
        ("attention_kernel", 3),
        ("Memcpy HtoD", 3),
    ]
    assert a.gpu_busy_share == pytest.approx(3 * 445 / 2760)
    # Host idle per step: 10 µs with no operator (input) + 10 before the copy's launch + 265
    # before the graph launch, and in steps 0 and 1 240 before the next step's launch:
    # 1335 µs of 2760 accounted for.
    host = next(f for f in r.findings if f.id == "host-work-between-replays")
    assert host.evidence["share_of_step"] == pytest.approx(1335 / 2760, abs=1e-4)
    assert host.saving_ms_per_step == pytest.approx(1.335 / 3, abs=1e-3)
    assert host.severity == "critical"
    cov = next(f for f in r.findings if f.id == "low-graph-coverage")
    assert cov.where[0] == "attention_kernel"
    assert "host-bound" not in _ids(r)  # replaced, and it would have said torch.compile
    _no_graph_advice(r)
    assert "88% of GPU time in 3 graph replays" in r.verdict
    # CPU between iterations: each step's range ends at +900, the next begins at +1000
    assert a.serving.between_steps_ms == pytest.approx((0.1, 0.1))


def test_kernels_tied_by_stream_window_when_correlation_is_missing(tmp_path: Path) -> None:
    r = analyze_path(write(tmp_path / "nocorr.json", _replay(corr=False)))
    g = r.analysis.graphs
    assert (g.graph_activity_count, g.by_stream_window, g.launches_without_kernels) == (6, 6, 0)
    assert g.coverage == pytest.approx(1170 / 1335)
    assert r.analysis.not_recorded_ms == 0.0


def test_graph_kernels_not_recorded_is_said_and_never_called_idle(tmp_path: Path) -> None:
    r = analyze_path(write(tmp_path / "missing.json", _replay(graph_kernels=False)))
    a = r.analysis
    assert a.graphs.launches_without_kernels == 3
    assert a.graphs.coverage is None  # the graphs' device time is not in the trace
    # the attention kernel queued behind the empty graph: the gap 35-710 of each step
    assert a.not_recorded_ms == pytest.approx(3 * 0.675)
    assert a.mean_step_ms == pytest.approx((2.76 - 3 * 0.675) / 3)
    f = next(f for f in r.findings if f.id == "graph-kernels-not-recorded")
    assert f.severity == "warning" and f.evidence["launches_without_kernels"] == 3
    assert "before the graphs are captured" in f.fix
    assert "behind GPU work the trace does not hold" in r.verdict
    assert "low-gpu-utilization" not in _ids(r, serious=True)


# -- eager decode -------------------------------------------------------------------------------
def _eager_decode_step(t0: float, c: int) -> list[dict[str, Any]]:
    """SGLang-style ``step[DECODE bs=16]``: 20 kernels, each launched at +40i+10 (5 µs) and
    running 8 µs later for 5 µs. Between kernels 27 µs of the 35 µs gap is before the launch."""
    ev = [
        annotation("step[DECODE bs=16]", t0, 900),
        pyframe("sglang/srt/model_executor/model_runner.py(100): forward", t0, 900),
    ]
    for i in range(20):
        ev += [runtime("cudaLaunchKernel", t0 + 40 * i + 10, 5, corr=c + i)]
        ev += [kernel(f"small_{i % 4}", t0 + 40 * i + 18, 5, corr=c + i)]
    return ev


def test_eager_decode_is_launch_bound_with_the_engine_fix(tmp_path: Path) -> None:
    events = [e for i in range(3) for e in _eager_decode_step(1000.0 * i, 100 * i)]
    r = analyze_path(write(tmp_path / "eager.json", events))
    f = next(f for f in r.findings if f.id == "eager-decode-launch-bound")
    # waiting on the host per step: 10 before the first launch, 19 x 27 between kernels, 217
    # (steps 0, 1: up to the next launch at +1010, clipped at +1000) or 117 (step 2, whose
    # window ends with the Python frame at +900): 2120 of 2900 µs
    assert f.evidence["share_of_decode_step"] == pytest.approx(2120 / 2900, abs=1e-4)
    assert f.saving_ms_per_step == pytest.approx(2.120 / 3, abs=1e-3)
    assert f.evidence["kernels_per_decode_step"] == 20
    assert f.severity == "critical" and "--cuda-graph-max-bs 16" in f.fix
    assert "host-bound" not in _ids(r)
    assert r.verdict.startswith("SGLang decode (batch 16): 3 steps")


# -- a blocking device-to-host copy per token ---------------------------------------------------
def _item_step(t0: float, c: int) -> list[dict[str, Any]]:
    """``.item()`` per token: kernel A (launched +10, runs 20-300); ``aten::item`` 30-320 with
    a ``cudaMemcpyAsync`` (+40) whose DtoH copy runs 300-302 and a ``cudaStreamSynchronize``
    50-305; kernel B launched at +400 (runs 408-600). Steps start every 700 µs; the last one
    ends with kernel B (+600)."""
    return [
        annotation("step[DECODE bs=1]", t0, 650),
        pyframe("gen.py(12): generate", t0 + 25, 305),
        runtime("cudaLaunchKernel", t0 + 10, 5, corr=c + 1),
        kernel("decoder_gemm", t0 + 20, 280, corr=c + 1),
        cpu_op("aten::item", t0 + 30, 290),
        cpu_op("aten::_local_scalar_dense", t0 + 31, 288),
        runtime("cudaMemcpyAsync", t0 + 40, 5, corr=c + 2),
        copy("Memcpy DtoH (Device -> Pageable)", t0 + 300, 2, corr=c + 2),
        runtime("cudaStreamSynchronize", t0 + 50, 255, corr=c + 3),
        runtime("cudaLaunchKernel", t0 + 400, 5, corr=c + 4),
        kernel("sampler", t0 + 408, 192, corr=c + 4),
    ]


def test_blocking_copy_per_decode_step(tmp_path: Path) -> None:
    events = [e for i in range(3) for e in _item_step(700.0 * i, 100 * i)]
    r = analyze_path(write(tmp_path / "item.json", events))
    f = next(f for f in r.findings if f.id == "sync-d2h-per-token")
    # after the copy returns (305): 98 µs of sync idle (302-400, B launched at 400), then in
    # steps 0 and 1 the host-late gap to the next step (600-700): 494 µs of 2000
    assert f.evidence["gpu_idle_after_copy_ms_per_step"] == pytest.approx(0.494 / 3, abs=1e-3)
    assert f.evidence["share_of_step"] == pytest.approx(494 / 2000, abs=1e-4)
    assert f.evidence["copies_per_step"] == 1
    assert f.evidence["cpu_held_ms_per_step"] == pytest.approx(0.26)  # 5 + 255 µs
    assert f.where == ["gen.py(12): generate"] and f.severity == "critical"
    assert "argmax(-1)" in f.fix
    assert "synchronous-copies" not in _ids(r) and "sync-stalls" not in _ids(r)
    assert "eager-decode-launch-bound" not in _ids(r)  # its host time is the copy's


# -- memory-bound decode ------------------------------------------------------------------------
def _gemv_step(t0: float, c: int) -> list[dict[str, Any]]:
    """One bf16 ``aten::mm`` [1, 4096] x [4096, 4096] per step, its kernel 20 µs."""
    mm = cpu_op("aten::mm", t0 + 10, 15)
    mm["args"] = {
        "External id": c,
        "Input Dims": [[1, 4096], [4096, 4096]],
        "Input type": ["c10::BFloat16", "c10::BFloat16"],
    }
    call = runtime("cudaLaunchKernel", t0 + 12, 5, corr=c)
    call["args"]["External id"] = c
    return [
        annotation("step[DECODE bs=1]", t0, 900),
        mm,
        call,
        kernel("gemv_bf16", t0 + 20, 20, corr=c),
    ]


def test_decode_bandwidth_from_recorded_shapes(tmp_path: Path) -> None:
    events = [e for i in range(2) for e in _gemv_step(1000.0 * i, 100 + i)]
    r = analyze_path(write(tmp_path / "gemv.json", events))
    bw = r.analysis.serving.bandwidth["decode"]
    nbytes = (4096 + 4096 * 4096 + 4096) * 2  # both inputs read, the [1, 4096] output written
    assert bw.bytes_moved == 2 * nbytes and bw.flops == 2 * 2 * 4096 * 4096
    assert bw.achieved_gb_per_s == pytest.approx(nbytes / 20e-6 / 1e9)  # 1678.5 GB/s
    assert bw.share_of_peak == pytest.approx(nbytes / 20e-6 / 3.35e12)  # H100 SXM: 3.35 TB/s
    assert bw.ridge_point == pytest.approx(989.4 / 3.35)
    f = next(f for f in r.findings if f.id == "memory-bound-decode")
    assert f.title.startswith("Decode runs at 50% of memory bandwidth")
    # the gap to 80% of peak on the 20 µs kernel: 20 * (1 - 0.501 / 0.8)
    assert f.saving_ms_per_step == round(0.02 * (1 - bw.share_of_peak / 0.8), 3)


# -- work queued from before the trace ----------------------------------------------------------
def _late_start(wait_record: bool = False, producer: bool = False) -> list[dict[str, Any]]:
    """A kernel launched at 10 (5 µs) that starts at 50 010 and ends the step at 50 110:
    nothing recorded ran before it."""
    ev = [
        annotation("ProfilerStep#1", 0, 60_000),
        runtime("cudaLaunchKernel", 10, 5, corr=1),
        kernel("first_gemm", 50_010, 100, corr=1),
    ]
    if wait_record:  # a GPU-side wait record: the trace shows what the stream waited on
        ev.append({**kernel("Stream Wait Event", 12, 1, corr=2), "cat": "cuda_sync"})
    if producer:  # another stream's kernel, launched late, ends right before: it may have
        # recorded the event the first kernel waited on
        ev += [runtime("cudaLaunchKernel", 48_990, 5, 3), kernel("producer", 49_000, 990, 3, 9)]
    return ev


def test_work_queued_before_the_trace_is_not_idle(tmp_path: Path) -> None:
    a = analyze_path(write(tmp_path / "late.json", _late_start())).analysis
    assert a.not_recorded_ms == pytest.approx(50.01)
    assert a.total.idle_ms["dependency_wait"] == 0.0
    assert a.mean_step_ms == pytest.approx(50.11 - 50.01)
    for kw in ({"wait_record": True}, {"producer": True}):
        b = analyze_path(write(tmp_path / "dep.json", _late_start(**kw))).analysis
        assert "not_recorded" not in b.total.idle_ms, kw  # a wait the trace can explain


# -- steps without ProfilerStep -----------------------------------------------------------------
def test_execute_model_graph_replay_and_forward_steps(tmp_path: Path) -> None:
    frame = "vllm/v1/worker/gpu_model_runner.py(3380): execute_model"
    ev = [pyframe(frame, 1000.0 * i, 500) for i in range(3)]
    ev += [kernel("k", 1000.0 * i + 10, 5, corr=-1) for i in range(3)]
    s = analyze_path(write(tmp_path / "vllm.json", ev)).analysis.steps
    assert (s.source, len(s)) == ("server-step", 3)

    ev = []
    for i in range(3):  # an iteration replays graph "a" (2 kernels) then graph "b" (1 kernel)
        t, c = 1000.0 * i, 10 * i
        ev += [
            runtime("cudaGraphLaunch", t, 5, corr=c),
            runtime("cudaGraphLaunch", t + 300, 5, c + 1),
        ]
        ev += [kernel("a0", t + 10, 50, c), kernel("a1", t + 60, 50, c)]
        ev += [kernel("b0", t + 310, 50, c + 1)]
    s = analyze_path(write(tmp_path / "replay.json", ev)).analysis.steps
    assert (s.source, len(s)) == ("graph-replay", 3)
    assert list(s.starts_us) == [0.0, 1000.0, 2000.0]

    ev = [pyframe("nn.Module: Decoder_0", 1000.0 * i, 400) for i in range(4)]
    ev += [pyframe("nn.Module: Linear_0", 1000.0 * i + 10, 100) for i in range(4)]
    s = analyze_path(write(tmp_path / "fwd.json", ev)).analysis.steps
    assert (s.source, len(s), s.labels[0]) == ("forward", 4, "nn.Module: Decoder_0")
