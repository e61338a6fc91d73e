"""What a torch operator does, from its name: matrix multiply, convolution, recurrent cell,
attention, or something else, in forward and backward alike.

The profiler names the operator that ran (``aten::convolution_backward``,
``aten::mkldnn_rnn_layer_backward``, ``aten::_scaled_dot_product_flash_attention_for_cpu``,
``aten::mm`` under ``AddmmBackward0``). A rule that asks "is this step compute or framework
overhead?" needs every one of them, on the CPU and on the GPU, not only the forward names a
module calls. No torch import: the rules and the trace analyser use it too.

The patterns stay strings that ``re`` compiles on first use, each behind a substring test that
every name it matches passes: most traces never compile the recurrent grammar, and a trace
without matrix products not the matrix one.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal

OpClass = Literal["matmul", "convolution", "recurrent", "attention", "other"]
"""Every class but ``other`` is arithmetic (dense math libraries), not per-operator overhead."""

# Forward and backward names of dense matrix products: mm/addmm/bmm/baddbmm/addbmm/matmul/
# linear (and their _backward, mkldnn_/fbgemm_ variants), matrix-vector products, scaled and
# integer GEMMs, einsum/tensordot/bilinear (which call bmm).
_MATMUL = (
    r"^(_?addmm|mm|bmm|baddbmm|addbmm|matmul|linear|addmv|mv|dot|vdot|addr|einsum|tensordot"
    r"|bilinear|_trilinear|chain_matmul|linalg_multi_dot|_scaled_mm|_int_mm|_addmm_activation"
    r"|mkldnn_linear|_mkldnn_linear|fbgemm_linear|_weight_int\w*mm|_sparse_mm|_sparse_addmm"
    r"|linear_backward|matmul_backward|mkldnn_linear_backward\w*|_scaled_grouped_mm|_grouped_mm)"
    r"(_out|_backward\w*|_input|_weights)?$"
)
_MATMUL_PARTS = ("mm", "matmul", "linear", "mv", "dot", "addr", "einsum")
"""Every name ``_MATMUL`` matches has one of these (bilinear: linear, tensordot: dot...)."""
# Every convolution entry point and backend: conv1d/2d/3d, conv_transpose*, convolution(_backward),
# cudnn/miopen/mkldnn convolutions, slow_conv*, thnn_conv*, depthwise; "conv" but not "convert".
_CONV = r"conv(?!ert)"
# Recurrent layers and cells, with the backend kernels that run them (oneDNN on the CPU, cuDNN,
# MIOpen) and their backward passes.
_RNN = (
    r"^(lstm|gru|rnn_tanh|rnn_relu|lstm_cell|gru_cell|rnn_tanh_cell|rnn_relu_cell|quantized_lstm"
    r"\w*|quantized_gru\w*|mkldnn_rnn\w*|_cudnn_rnn\w*|miopen_rnn\w*|_thnn_fused_lstm_cell\w*"
    r"|_thnn_fused_gru_cell\w*|_thnn_differentiable_\w+|lstm_mps\w*|_lstm_mps\w*)$"
)
_RNN_PARTS = ("lstm", "gru", "rnn", "_thnn_")
"""Every name ``_RNN`` matches has one of these."""
_ATTENTION = (
    *("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention"),
    *("_fused_sdp", "_native_multi_head_attention", "multi_head_attention", "flex_attention"),
    "_triton_multi_head",
    "_transformer_encoder_layer_fwd",  # nn.TransformerEncoderLayer's fused inference path
)


def _base(name: str) -> str:
    """``aten::addmm`` -> ``addmm``; ``aten::add_.Tensor`` -> ``add_``."""
    name = name.rsplit("::", 1)[-1]
    return name.split(".", 1)[0]


@lru_cache(maxsize=4096)
def classify_op(name: str) -> OpClass:
    """The class of a profiler operator name (``aten::...``, ``mkldnn::...``, ``cudnn::...``)."""
    base = _base(name).lower()
    if any(s in base for s in _ATTENTION):
        return "attention"
    if any(s in base for s in _RNN_PARTS) and re.match(_RNN, base):
        return "recurrent"
    if "conv" in base and re.search(_CONV, base):
        return "convolution"
    if any(s in base for s in _MATMUL_PARTS) and re.match(_MATMUL, base):
        return "matmul"
    return "other"
