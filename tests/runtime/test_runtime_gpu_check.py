"""The GPU check's runtime sections: importable and failing with a reason without CUDA; the trace
arithmetic, the GPT/MFU path and the GradScaler path work on the CPU with tiny models, and what
they return passes the same judges as on the GPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import torch

SCRIPT = Path(__file__).parents[2] / "scripts" / "gpu_check_runtime.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check_runtime", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_overlap_from_trace() -> None:
    gc = _load()
    ev = [
        {"ph": "X", "cat": "gpu_memcpy", "ts": 0, "dur": 100, "args": {"stream": 20}},
        {"ph": "X", "cat": "gpu_memcpy", "ts": 300, "dur": 100, "args": {"stream": 20}},
        {"ph": "X", "cat": "kernel", "ts": 50, "dur": 30, "args": {"stream": 7}},
        # overlaps the kernel above:
        {"ph": "X", "cat": "kernel", "ts": 70, "dur": 60, "args": {"stream": 7}},
        # on the copy's own stream: not overlap
        {"ph": "X", "cat": "kernel", "ts": 310, "dur": 10, "args": {"stream": 20}},
    ]
    out = gc.overlap_from_trace({"traceEvents": ev})
    assert out["copy_us"] == 200 and out["copy_overlapped_with_kernels_us"] == 50
    assert out["overlap_share"] == pytest.approx(0.25)
    assert out["copy_streams"] == [20] and out["kernel_streams"] == [7, 20]
    # compute: the union of kernels on streams without copies (50-130 us on stream 7)
    assert out["compute_streams"] == [7] and out["compute_us"] == 80
    o = gc.judge.prefetch_overlap(out)
    assert o["separate_streams"] and o["overlap_of_min"] == pytest.approx(50 / 80)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_every_section_fails_with_a_reason_without_cuda(tmp_path: Path) -> None:
    assert _load().main([str(tmp_path), "--only", "precision,fp16"]) == 1
    for name in ("precision", "fp16"):
        v = json.loads((tmp_path / "verdicts" / f"{name}.json").read_text())
        assert v["pass"] is False and v["evidence"]["error"] == "no CUDA device"


def test_fp16_path_counts_one_skipped_step_on_cpu() -> None:
    gc = _load()
    out = gc.check_fp16(device="cpu", width=32)
    assert out["skipped_steps"] == 1 and out["grad_scaler"]
    assert out["scale_before_after"][1] == out["scale_before_after"][0] / 2
    assert gc.judge.judge_fp16(out)["pass"]


def test_gpt_mfu_path_on_cpu() -> None:
    out = _load().check_mfu(
        6, "off", vocab=64, dim=32, layers=2, heads=4, seq=16, batch=4, workers=0
    )
    s = out["summary"]
    assert out["precision"] == "fp32" and s["steps"] == 4 and s["mfu"] is None
    assert s["tokens_per_s"] == pytest.approx(16 * s["samples_per_s"])
    # CPU fused attention is uncounted by FlopCounterMode; the estimate brings the count near the
    # analytic one (which ignores layer norms, GELU and softmax).
    assert any("fused attention" in n for n in s["notes"])
    assert 0.9 < out["measured_over_analytic"] < 1.2
