"""The memory-bound unfused work family (``rules/families/fusion.py``): elementwise, copy and
reduction kernels taking a large share of a busy device's time lead, with compile and a static
KV cache as the fix; GEMM-bound, already-compiled and host-bound steps stay quiet."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_file
from tests.core.synth import annotation, cpu_op, launched, write_trace
from torchdoctor.analysis.elementwise_traffic import op_bytes
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families import fusion

ID = "unfused-memory-bound"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_kernel"
EAGER = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"
)
INDUCTOR = "triton_poi_fused_add_mul_0"


def _trace(
    tmp_path: Path,
    ew_us: float,
    name: str = EAGER,
    step_us: float = 400.0,
    backward: bool = False,
    steps: int = 3,
) -> Path:
    """Per step: a 100 µs bf16 GEMM, then five ``ew_us`` elementwise kernels back to back."""
    ev: list[dict[str, Any]] = []
    for i in range(steps):
        t0, c = i * step_us, 100 * i
        ev.append(annotation(f"ProfilerStep#{i}", t0, step_us))
        ev.extend(launched(GEMM, t0 + 1, t0 + 10, 100, corr=c + 1))
        for j in range(5):
            ev.extend(launched(name, t0 + 2 + j, t0 + 110 + j * ew_us, ew_us, corr=c + 2 + j))
        if backward:
            ev.append(cpu_op("autograd::engine::evaluate_function: MulBackward0", t0 + 8, 1))
    return write_trace(tmp_path / f"ew_{name[:6]}_{ew_us:.0f}_{step_us:.0f}.json", ev)


def _ids(path: Path) -> list[str]:
    return [f.id for f in analyze_path(path).findings]


def test_elementwise_work_on_a_busy_device_leads_with_half_its_time_as_saving(
    tmp_path: Path,
) -> None:
    r = analyze_path(_trace(tmp_path, ew_us=50.0))
    f = r.findings[0]
    assert f.id == ID
    # 5 x 50 µs of elementwise against 100 µs of GEMM: 250 of 350 µs of device time
    assert f.evidence["unfused_share_of_gpu_time"] == pytest.approx(250 / 350, abs=1e-4)
    assert f.evidence["unfused_kernels_per_step"] == 5
    assert f.evidence["top_kernels_per_step"] == {"vectorized_elementwise_kernel": 5}
    assert f.saving_ms_per_step == pytest.approx(0.125, abs=1e-3)  # half of 0.25 ms
    assert f.severity == "critical"  # 125 µs of a 400 µs step
    assert 'cache_implementation = "static"' in f.fix and 'mode="reduce-overhead"' in f.fix


def test_a_training_step_gets_compile_without_the_kv_cache(tmp_path: Path) -> None:
    f = next(f for f in analyze_path(_trace(tmp_path, 50.0, backward=True)).findings if f.id == ID)
    assert "torch.compile(model)" in f.fix and "cache" not in f.fix


def test_a_serving_engine_is_told_to_use_its_own_compiled_mode(tmp_path: Path) -> None:
    path = _trace(tmp_path, 50.0)
    doc = json.loads(path.read_text())
    doc["traceEvents"].append(cpu_op("vllm::unified_attention_with_output", 9, 1))
    path.write_text(json.dumps(doc))
    f = next(f for f in analyze_path(path).findings if f.id == ID)
    assert "enforce_eager" in f.fix and "StaticCache" not in f.fix


def test_under_the_share_threshold_nothing_fires(tmp_path: Path) -> None:
    # 5 x 10 µs against 100 µs of GEMM: a third of device time, under 40%
    assert th.UNFUSED_SHARE > 50 / 150
    assert ID not in _ids(_trace(tmp_path, ew_us=10.0))


def test_inductor_kernels_are_fused_already(tmp_path: Path) -> None:
    assert ID not in _ids(_trace(tmp_path, ew_us=50.0, name=INDUCTOR))


def test_an_idle_device_is_left_to_the_host_findings(tmp_path: Path) -> None:
    # the same kernels in a 2 ms step: the device is busy 17.5%, under the gate
    assert th.UNFUSED_BUSY > 350 / 2000
    assert ID not in _ids(_trace(tmp_path, ew_us=50.0, step_us=2000.0))


def test_the_h100_qwen_trace_leads_with_its_unfused_kernels() -> None:
    """Checked against the raw JSON: the torch.cat copy kernels counted per step, the saving
    half the unfused time, and the sync stall it outranks."""
    path = corpus_file("h100_qwen_0p5b_infer")
    r = analyze_path(path)
    f = r.findings[0]
    assert f.id == ID and f.severity == "critical"
    raw = json.loads(gzip.decompress(path.read_bytes()))
    events = raw["traceEvents"]
    steps = [e for e in events if e.get("cat") == "user_annotation" and "ProfilerStep" in e["name"]]
    assert len(steps) == 1  # every kernel of the trace belongs to its one step
    cats = [
        e for e in events
        if e.get("cat") == "kernel" and "CatArrayBatchedCopy" in e.get("name", "")
    ]  # fmt: skip
    assert f.evidence["top_kernels_per_step"]["CatArrayBatchedCopy"] == len(cats) == 69
    assert f.evidence["unfused_share_of_gpu_time"] > 0.6
    assert f.saving_ms_per_step == pytest.approx(f.evidence["unfused_ms_per_step"] / 2, rel=1e-3)
    assert "aten::mul" in f.where and "aten::mm" not in f.where
    sync = next(g for g in r.findings if g.id == "sync-stalls")
    assert f.saving_ms_per_step > 10 * sync.saving_ms_per_step
    assert "StaticCache" in f.fix and 'mode="reduce-overhead"' in f.fix


@pytest.mark.parametrize(
    "name",
    [
        "h200/planted_bf16_matmul",
        "v100_resnet50_train_workers4",
        "h200/nanogpt_char_compiled_check",
    ],
)
def test_gemm_bound_and_compiled_corpus_traces_stay_quiet(name: str) -> None:
    assert ID not in _ids(corpus_file(name))


def test_short_names_drop_namespaces_and_templates() -> None:
    raw = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous "
    assert fusion._short(raw + "namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(a)") == (
        "CatArrayBatchedCopy"
    )


def test_elementwise_bytes_read_every_input_and_write_the_broadcast_output() -> None:
    big, row = [16, 559, 1024], [16, 559, 1]
    n = 16 * 559 * 1024
    # fp32 x fp32 with a broadcast row: both inputs read, the full-size output written
    assert op_bytes([big, row], ["float", "float"], "aten::mul") == n * 4 + 16 * 559 * 4 + n * 4
    # a bf16 scalar multiply: the Scalar is no tensor
    assert op_bytes([big, []], ["c10::BFloat16", "Scalar"], "aten::mul") == n * 2 * 2
    # copy_(dst bf16, src fp32): the source read, the destination written
    assert op_bytes([big, big, []], ["c10::BFloat16", "float", "Scalar"], "aten::copy_") == n * 6
    assert op_bytes([[3, 4], [5]], ["float", "float"], "aten::add") is None  # no broadcast
    assert op_bytes([[[2, 3], [2, 3]], []], ["TensorList", "Scalar"], "aten::cat") is None


def test_the_qwen_kernels_bandwidth_is_a_lower_bound_under_the_h100_peak() -> None:
    """The covered time checked against the raw JSON: kernels whose runtime call's External id
    names a shape-recorded elementwise operator."""
    path = corpus_file("h100_qwen_0p5b_infer")
    f = analyze_path(path).findings[0]
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ops = {
        e["args"]["External id"]: e for e in events
        if e.get("cat") == "cpu_op" and e["args"].get("Input Dims") and "External id" in e["args"]
    }  # fmt: skip
    runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    covered = 0.0
    for e in events:
        if e.get("cat") != "kernel" or "elementwise" not in e["name"]:
            continue
        r = runtime.get(e["args"].get("correlation"))
        op = ops.get(r["args"].get("External id")) if r else None
        if op is not None and op["name"] in (
            "aten::mul",
            "aten::add",
            "aten::copy_",
            "aten::pow",
            "aten::neg",
            "aten::rsqrt",
            "aten::silu",
        ):
            covered += e["dur"] / 1e3
    share = f.evidence["bytes_known_share_of_unfused_time"]
    assert share * f.evidence["unfused_ms_per_step"] == pytest.approx(covered, rel=0.01)
    assert 0 < f.evidence["achieved_gb_per_s"] < f.evidence["peak_gb_per_s"] == 3350.0
