"""``classify_op`` compiles its recurrent and matrix-product grammars only for a name that has one
of their substrings: the test must hold for every operator torch names, or a name the grammar
matches would be classed "other" without the pattern ever being asked."""

from __future__ import annotations

import re

import pytest

from torchdoctor.analysis import op_classes
from torchdoctor.analysis.op_classes import classify_op


def _operator_bases() -> set[str]:
    torch = pytest.importorskip("torch")
    names = {s.name for s in torch._C._jit_get_all_schemas()}
    bases = {op_classes._base(n).lower() for n in names}
    # and the backward and out forms the grammars accept after a base name
    return bases | {f"{b}{suffix}" for b in bases for suffix in ("_backward", "_out")}


def test_every_name_a_grammar_matches_passes_its_substring_test() -> None:
    matched = {"matmul": 0, "recurrent": 0}
    for base in _operator_bases():
        if re.match(op_classes._MATMUL, base):
            matched["matmul"] += 1
            assert any(p in base for p in op_classes._MATMUL_PARTS), base
        if re.match(op_classes._RNN, base):
            matched["recurrent"] += 1
            assert any(p in base for p in op_classes._RNN_PARTS), base
        if re.search(op_classes._CONV, base):
            assert "conv" in base
    # the grammars did match names (the loop was not vacuous)
    assert matched["matmul"] >= 30 and matched["recurrent"] >= 10, matched


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("aten::addmm", "matmul"),
        ("aten::_trilinear", "matmul"),
        ("aten::linalg_multi_dot", "matmul"),
        ("aten::_thnn_differentiable_lstm_cell_backward", "recurrent"),
        ("aten::mkldnn_rnn_layer_backward", "recurrent"),
        ("aten::convolution_backward", "convolution"),
        ("aten::_convert_indices_from_coo_to_csr", "other"),
        ("aten::_transformer_encoder_layer_fwd", "attention"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
        ("aten::add_.Tensor", "other"),
        ("aten::mmx", "other"),  # "mm" in the name, not the grammar's
    ],
)
def test_classify_op(name: str, cls: str) -> None:
    classify_op.cache_clear()
    assert classify_op(name) == cls
