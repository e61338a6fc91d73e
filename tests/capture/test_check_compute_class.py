"""Compute is classified by what an operator does, forward and backward, CPU and GPU names, and
a step whose time is convolution and LSTM math is never called framework overhead."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.capture.check_helpers import EXAMPLES, check_inprocess
from torchdoctor.analysis.op_classes import classify_op
from torchdoctor.rules.run_rules import run_findings

FORWARD_AND_BACKWARD = {
    "aten::convolution_backward": "convolution",
    "aten::cudnn_convolution": "convolution",
    "aten::mkldnn_convolution": "convolution",
    "aten::_slow_conv2d_backward": "convolution",
    "aten::conv_transpose2d": "convolution",
    "aten::mkldnn_rnn_layer": "recurrent",
    "aten::mkldnn_rnn_layer_backward": "recurrent",
    "aten::_cudnn_rnn_backward": "recurrent",
    "aten::lstm": "recurrent",
    "aten::lstm_cell": "recurrent",
    "aten::_thnn_fused_lstm_cell_backward_impl": "recurrent",
    "aten::gru": "recurrent",
    "aten::mm": "matmul",
    "aten::addmm": "matmul",
    "aten::bmm": "matmul",
    "aten::baddbmm": "matmul",
    "aten::linear_backward": "matmul",
    "aten::_scaled_mm": "matmul",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "attention",
    "aten::_efficient_attention_backward": "attention",
    "aten::_flash_attention_forward": "attention",
    "aten::_transformer_encoder_layer_fwd": "attention",
    "aten::_native_multi_head_attention": "attention",
}
NOT_COMPUTE = [
    "aten::add_",
    "aten::_to_copy",
    "aten::convert_element_type",
    "aten::sum",
    "aten::mul",
    "aten::copy_",
    "aten::addcmul_",
    "aten::lerp_",
    "aten::mean",
]


@pytest.mark.parametrize(("name", "cls"), sorted(FORWARD_AND_BACKWARD.items()))
def test_backward_and_backend_ops_are_classified(name: str, cls: str) -> None:
    assert classify_op(name) == cls


@pytest.mark.parametrize("name", NOT_COMPUTE)
def test_pointwise_ops_are_not_compute(name: str) -> None:
    assert classify_op(name) == "other"


def test_profiled_conv_and_lstm_steps_count_their_backward() -> None:
    import torch

    from torchdoctor.capture.profiling import summarise_ops

    conv = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3)
    )
    lstm = torch.nn.LSTM(16, 32, num_layers=2)
    x, s = torch.randn(4, 3, 16, 16), torch.randn(12, 2, 16)

    def step() -> None:
        conv(x).sum().backward()
        lstm(s)[0].sum().backward()

    step()
    with torch.profiler.profile() as prof:
        step()
    ops = summarise_ops(prof.events(), 1)
    by_class = ops["time_by_class_ms_per_step"]
    assert by_class["recurrent"] > 0 and by_class["convolution"] > 0
    assert ops["compute_share"] > 0.5, ops  # before: LSTM and conv backward counted as overhead


def _record(**ops: float) -> dict[str, object]:
    base = {
        "gemm_share_basis": "cpu",
        "top_level_ops_per_step": 400.0,
        "median_op_us": 3.0,
        "op_time_ms_per_step": 40.0,
        "tiny_op_time_ms_per_step": 1.0,
        "tiny_op_threshold_us": 20.0,
    }
    return {
        "exit": {"status": "stopped"},
        "steps": {"count": 6, "measured_steps": 3, "mean_step_ms": 60.0, "step_ms": [60.0] * 6},
        "ops": {**base, **ops},
    }


def test_compute_holding_the_step_is_not_overhead() -> None:
    found = run_findings(_record(gemm_share=0.1, compute_share=0.8, compute_ms_per_step=32.0))
    assert not [f for f in found if f.id == "host-bound"]


def test_overhead_title_states_its_numbers_not_a_claim() -> None:
    found = run_findings(_record(gemm_share=0.05, compute_share=0.1, compute_ms_per_step=4.0))
    (f,) = [f for f in found if f.id == "host-bound"]
    assert "not compute" not in f.title
    assert "7% of the step" in f.title  # 4 ms of compute in a 60 ms step


@pytest.mark.slow
def test_check_conv_lstm_script_is_not_called_overhead(tmp_path: Path) -> None:
    r = check_inprocess(tmp_path, EXAMPLES / "conv_lstm_step.py")
    assert r.code == 0, r.stderr
    ops = r.run["ops"]
    assert ops["compute_share"] > 0.5, ops
    assert "host-bound" not in [f["id"] for f in r.report["findings"]]
