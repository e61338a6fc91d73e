"""FLOPs inside fused and composite operators (capture/op_flops.py): the shape formulas against
numbers worked out by hand, and the counting dispatch mode on the real modules, checking that it
sees the fused operator whole (the path inference takes) and counts the same hand-worked FLOPs."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from torchdoctor.capture import op_flops as of
from torchdoctor.capture.workcount import StepCounter


def count(fn: Any) -> dict[str, Any]:
    c = StepCounter()
    c.begin()
    try:
        fn()
    finally:
        w = c.end()
    assert w is not None
    return w.summary()


def op_flops(s: dict[str, Any]) -> dict[str, float]:
    return {o["op"]: o["flops"] for o in s["top_ops"]}


# -- the formulas, by hand ------------------------------------------------------------------------
def test_attention_is_four_b_h_l_s_e() -> None:
    # Q K^T: 16x32 @ 32x16 = 2*16*32*16; A V: 16x16 @ 16x32, the same; 2 batches x 4 heads
    assert of.attention_flops(2 * 4, 16, 16, 32, 32) == 8 * (16384 + 16384) == 262144
    # cross attention with a narrower value: 2*10*8*20 + 2*10*20*4
    assert of.attention_flops(1, 10, 20, 8, 4) == 3200 + 1600


def test_encoder_layer_by_hand() -> None:
    # 32 sequences of 64 tokens, width 256, feed-forward 1024: 2048 tokens
    in_proj = 2 * 2048 * 256 * 768  # 805,306,368
    scores_and_values = 2 * (2 * 32 * 64 * 64 * 256)  # 134,217,728
    out_proj = 2 * 2048 * 256 * 256  # 268,435,456
    ffn = 2 * (2 * 2048 * 256 * 1024)  # 2,147,483,648
    assert in_proj + scores_and_values + out_proj + ffn == 3_355_443_200
    assert of.encoder_layer_flops([64] * 32, 256, 1024) == 3_355_443_200
    # ragged sequences (the nested fast path): attention grows with each length squared
    assert of.encoder_layer_flops([5, 3], 16, 32) == (
        2 * 8 * 16 * 48 + 4 * 16 * (25 + 9) + 2 * 8 * 16 * 16 + 4 * 8 * 16 * 32
    )


def test_cross_attention_projects_keys_and_values_over_the_key_length() -> None:
    # q proj 2*10*64*64 = 81920; k and v 2*2*20*64*64 = 327680; QK^T and AV 2*2*10*20*64 =
    # 51200; out proj 81920
    assert of.multi_head_attention_flops([10], [20], 64) == 81920 + 327680 + 51200 + 81920


def test_recurrent_stack_counts_every_weight_matrix_per_position() -> None:
    # 2-layer LSTM 64 -> 128 over 8 x 20 positions: w_ih0 512x64, w_hh0 512x128, w_ih1 512x128,
    # w_hh1 512x128 (biases are not products)
    shapes = [(512, 64), (512, 128), (512,), (512,), (512, 128), (512, 128), (512,), (512,)]
    assert of.recurrent_flops(160, shapes) == 2 * 160 * (32768 + 3 * 65536) == 73_400_320


def test_einsum_pairs_left_to_right() -> None:
    assert of.einsum_flops("bld,de->ble", [(8, 20, 64), (64, 32)]) == 2 * 8 * 20 * 64 * 32
    # (2x3)(3x4) = 2*2*3*4 = 48, then (2x4)(4x5) = 2*2*4*5 = 80
    assert of.einsum_flops("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]) == 128
    assert of.einsum_flops("ij,jk", [(2, 3), (3, 4)]) == 48  # implicit output "ik"
    assert of.einsum_flops("ii->i", [(5, 5)]) == 0
    with pytest.raises(of.Uncountable):
        of.einsum_flops("...ij,jk->...ik", [(2, 3, 4), (4, 5)])


def test_which_operators_want_flops() -> None:
    assert of.wants_flops("aten::_transformer_encoder_layer_fwd")
    assert of.wants_flops("aten::lstm.input") and of.wants_flops("aten::mkldnn_convolution")
    assert of.wants_flops("mylib::fused_mlp")  # a custom operator: compute nobody can count
    for name in ("aten::add.Tensor", "aten::mkldnn_reorder_conv2d_weight", "aten::conv_tbc"):
        assert not of.wants_flops(name), name
    assert not of.wants_flops("_c10d_functional::all_reduce")
    assert of.composite_flops("aten::relu", {}, None) is None


# -- the counting mode on real modules ------------------------------------------------------------
def encoder(nested: bool) -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)
    return nn.TransformerEncoder(layer, 1, enable_nested_tensor=nested).eval()


@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad])
def test_the_encoder_fast_path_is_counted_whole(mode: Any) -> None:
    enc, x = encoder(False), torch.randn(2, 5, 16)
    with mode():
        s = count(lambda: enc(x))
    # 10 tokens: in-proj 15360, QK^T and AV 4*2*5*5*16 = 3200, out-proj 5120, FFN 20480
    assert op_flops(s) == {"aten::_transformer_encoder_layer_fwd": 44160.0}
    assert s["flops"] == 44160 and s["uncounted_compute_ops"] == {}


def test_a_padded_batch_on_the_nested_fast_path_counts_each_sequence() -> None:
    enc, x = encoder(True), torch.randn(2, 5, 16)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    with torch.inference_mode():
        s = count(lambda: enc(x, src_key_padding_mask=pad))
    fused = op_flops(s)["aten::_transformer_encoder_layer_fwd"]
    assert fused == of.encoder_layer_flops([5, 3], 16, 32) == 34944
    assert s["counting_errors"] == 0


def test_native_multi_head_attention_under_no_grad() -> None:
    torch.manual_seed(0)
    mha, x = nn.MultiheadAttention(16, 2, batch_first=True).eval(), torch.randn(2, 5, 16)
    with torch.no_grad():
        s = count(lambda: mha(x, x, x, need_weights=False))
    # q, k, v projections 3*2*10*16*16 = 15360, attention 3200, out-projection 5120
    assert op_flops(s) == {"aten::_native_multi_head_attention": 23680.0}


def test_attention_on_the_cpu_forward_and_backward() -> None:
    q = torch.randn(2, 4, 16, 32, requires_grad=True)
    s = count(lambda: nn.functional.scaled_dot_product_attention(q, q, q).sum().backward())
    flops = op_flops(s)
    assert flops["aten::_scaled_dot_product_flash_attention_for_cpu"] == 262144
    assert flops["aten::_scaled_dot_product_flash_attention_for_cpu_backward"] == 2 * 262144
    with torch.inference_mode():
        top = count(lambda: nn.functional.scaled_dot_product_attention(q, q, q))
    assert op_flops(top) == {"aten::scaled_dot_product_attention": 262144.0}


def test_lstm_inference_and_training() -> None:
    torch.manual_seed(0)
    lstm, x = nn.LSTM(64, 128, 2, batch_first=True), torch.randn(8, 20, 64)
    with torch.inference_mode():
        s = count(lambda: lstm(x))
    assert op_flops(s)["aten::lstm.input"] == 73_400_320
    # training on the CPU runs oneDNN layer by layer; the backward is twice the forward
    t = count(lambda: lstm(x)[0].sum().backward())
    assert t["flops"] == 3 * 73_400_320
    assert op_flops(t)["aten::mkldnn_rnn_layer_backward"] == 2 * 73_400_320


def test_gru_and_a_packed_lstm() -> None:
    torch.manual_seed(0)
    gru, x = nn.GRU(64, 128), torch.randn(20, 8, 64)
    with torch.inference_mode():
        s = count(lambda: gru(x))
    assert op_flops(s)["aten::gru.input"] == 2 * 160 * (384 * 64 + 384 * 128)
    lstm = nn.LSTM(64, 128)
    packed = nn.utils.rnn.pack_padded_sequence(x, [20] * 4 + [10] * 4)
    with torch.inference_mode():
        p = count(lambda: lstm(packed))
    # 120 real positions, not 160: the padding is not run
    assert op_flops(p)["aten::lstm.data"] == 2 * 120 * (512 * 64 + 512 * 128)


def test_transposed_convolution_and_einsum_under_inference_mode() -> None:
    torch.manual_seed(0)
    ct, img = nn.ConvTranspose2d(8, 4, 3, stride=2), torch.randn(2, 8, 10, 10)
    with torch.inference_mode():
        s = count(lambda: ct(img))
    # every input pixel meets every 8x4x3x3 weight: 2 * 2 * 100 * 8 * 4 * 9
    assert op_flops(s)["aten::conv_transpose2d.input"] == 115200
    assert count(lambda: ct(img))["flops"] == 115200  # autograd's convolution: the same
    a, b = torch.randn(8, 20, 64), torch.randn(64, 32)
    with torch.inference_mode():
        e = count(lambda: torch.einsum("bld,de->ble", a, b))
    assert e["flops"] == 2 * 8 * 20 * 64 * 32


def test_compute_that_cannot_be_counted_is_named() -> None:
    a, b = torch.randn(3, 8, 20, 64), torch.randn(64, 32)
    with torch.inference_mode():
        s = count(lambda: torch.einsum("...d,de->...e", a, b))
    assert s["flops"] == 0 and s["uncounted_compute_ops"] == {"aten::einsum": 1}
    assert s["counting_errors"] == 0 and s["bytes"] > 0  # its traffic still counts


@torch.library.custom_op("tdtest::fused_mlp", mutates_args=())
def fused_mlp(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w) @ w.t()


def test_a_custom_operator_is_uncounted_compute() -> None:
    x, w = torch.randn(32, 64), torch.randn(64, 256)
    s = count(lambda: fused_mlp(x, w))
    # the dispatch mode sees the custom operator whole, not the matmuls inside it
    assert s["uncounted_compute_ops"] == {"tdtest::fused_mlp": 1} and s["flops"] == 0


def test_gpu_and_backend_kernels_read_their_own_argument_layouts() -> None:
    # cuDNN's LSTM (called on a GPU under autograd): the flat weight list, biases and all
    x = torch.randn(20, 8, 64)
    weights = [torch.randn(512, 64), torch.randn(512, 128), torch.randn(512), torch.randn(512)]
    a = {"input": x, "weight": weights, "weight_stride0": 4}
    assert of.composite_flops("aten::_cudnn_rnn", a, None) == 2 * 160 * (512 * 64 + 512 * 128)
    assert of.composite_flops("aten::_cudnn_rnn_backward", a, None) == 4 * 160 * (
        512 * 64 + 512 * 128
    )
    # oneDNN's convolution called directly: the same count as nn.Conv2d's
    img, w = torch.randn(2, 8, 10, 10), torch.randn(4, 8, 3, 3)
    out = torch.ops.aten.mkldnn_convolution(img, w, None, [0, 0], [1, 1], [1, 1], 1)
    s = count(lambda: torch.ops.aten.mkldnn_convolution(img, w, None, [0, 0], [1, 1], [1, 1], 1))
    assert tuple(out.shape) == (2, 4, 8, 8)
    assert s["flops"] == 2 * 2 * 64 * 4 * 8 * 9  # 2 x outputs (2x4x8x8) x 8x3x3 products each
    # the fused GELU linear of the encoder's feed-forward
    m1, m2 = torch.randn(10, 16), torch.randn(16, 32)
    args = {"self": torch.randn(32), "mat1": m1, "mat2": m2}
    assert of.composite_flops("aten::_addmm_activation", args, None) == 2 * 10 * 16 * 32


def test_an_encoder_layer_training_step_counts_every_product() -> None:
    # autograd splits the layer into addmm/mm and the CPU flash-attention kernel (which torch's
    # registry lacks): forward + backward must be the analytic count, the input's own gradient
    # aside (x does not require it)
    torch.manual_seed(0)
    layer, x = (
        nn.TransformerEncoderLayer(64, 4, 256, batch_first=True, dropout=0.0),
        torch.randn(8, 32, 64),
    )
    s = count(lambda: layer(x).sum().backward())
    fwd = of.encoder_layer_flops([32] * 8, 64, 256)
    in_proj = 2 * 256 * 64 * 192
    assert s["flops"] == fwd + (2 * fwd - in_proj) == 75_497_472
    assert s["uncounted_compute_ops"] == {}
