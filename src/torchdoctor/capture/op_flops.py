"""FLOPs of the fused and composite operators that torch's flop registry does not count.

``torch.utils.flop_counter.flop_registry`` covers the matrix operators autograd decomposes a
training step into (``mm``, ``addmm``, ``bmm``, ``convolution``, the CUDA attention kernels).
Inference runs other operators: under ``inference_mode`` or ``no_grad`` a dispatch mode sees the
fused fast paths whole (``_transformer_encoder_layer_fwd`` for ``nn.TransformerEncoder`` in eval
mode, ``_native_multi_head_attention``, ``scaled_dot_product_attention``, ``lstm``/``gru``),
and the composites autograd would have split (``linear``, ``conv2d``, ``einsum``). On the CPU
even a training step runs some the registry misses (``_scaled_dot_product_flash_attention_for_cpu``
and its backward, ``mkldnn_rnn_layer`` and its backward). Counted as zero, a healthy fused model
looks as if it ran at 1% of its roofline.

Each formula counts the matrix products inside the operator (2 FLOPs per multiply-add) from its
input shapes; softmax, layer norms, activations and gate nonlinearities are element-wise work,
bandwidth-bound, and count no FLOPs here (their bytes are counted with the operator's). The
shape formulas are plain functions of ints, tested against hand-worked numbers; the adapters
read the shapes off the operator's arguments as ``aten`` passes them.

``composite_flops`` returns None for an operator it has no formula for, and raises
``Uncountable`` for one known to compute whose shapes it cannot read (a nested tensor without
its sizes, an argument layout it does not know): ``capture/workcount.py`` records those by name
(``uncounted_compute_ops``) so the step's account can treat a dominant one as compute.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any


class Uncountable(Exception):
    """A compute operator whose FLOPs cannot be read from its arguments."""


# -- formulas on shapes ------------------------------------------------------------------------
def gemm_flops(m: int, k: int, n: int) -> float:
    """FLOPs of an (m x k) @ (k x n) product: 2 per multiply-add."""
    return 2.0 * m * k * n


def attention_flops(heads: int, q_len: int, kv_len: int, qk_dim: int, v_dim: int) -> float:
    """FLOPs of scaled dot-product attention over ``heads`` (batch x heads) independent heads:
    Q K^T (q_len x qk_dim @ qk_dim x kv_len) and the weights times V (q_len x kv_len @
    kv_len x v_dim); ``4 * B * H * L * S * E`` when ``v_dim == qk_dim``."""
    return heads * (gemm_flops(q_len, qk_dim, kv_len) + gemm_flops(q_len, kv_len, v_dim))


def multi_head_attention_flops(q_lens: Sequence[int], kv_lens: Sequence[int], embed: int) -> float:
    """FLOPs of ``nn.MultiheadAttention`` (equal q/k/v widths ``embed``) over a batch of
    sequences (query lengths ``q_lens``, key lengths ``kv_lens``): the Q projection on every
    query token, the K and V projections on every key token, attention across all heads
    (heads x head_dim = embed) and the output projection."""
    total = 0.0
    for L, S in zip(q_lens, kv_lens, strict=True):
        total += gemm_flops(L, embed, embed) + 2 * gemm_flops(S, embed, embed)
        total += attention_flops(1, L, S, embed, embed)
        total += gemm_flops(L, embed, embed)
    return total


def encoder_layer_flops(lens: Sequence[int], embed: int, ffn: int) -> float:
    """FLOPs of one ``nn.TransformerEncoderLayer`` over sequences of lengths ``lens``:
    self-attention (in-projection, Q K^T, A V, out-projection) and the two feed-forward linears
    (embed -> ffn -> embed)."""
    tokens = sum(lens)
    attention = multi_head_attention_flops(lens, lens, embed)
    return attention + gemm_flops(tokens, embed, ffn) + gemm_flops(tokens, ffn, embed)


def recurrent_flops(tokens: int, weight_shapes: Sequence[Sequence[int]]) -> float:
    """FLOPs of a recurrent layer stack (RNN, LSTM, GRU; any layers, directions, projection)
    run over ``tokens`` (time steps x batch) input positions: every weight matrix (input-hidden,
    hidden-hidden, projection) multiplies one vector per position and direction, and each
    direction has its own matrices, so the total is 2 x tokens x all weight elements."""
    return 2.0 * tokens * sum(math.prod(s) for s in weight_shapes if len(s) == 2)


def einsum_flops(equation: str, shapes: Sequence[Sequence[int]]) -> float:
    """FLOPs of an ``einsum``, contracted pairwise left to right (torch's order without
    opt_einsum): each pair costs 2 x the product of the sizes of every index either operand
    has. One operand (a sum or a transpose) counts none."""
    lhs, arrow, out = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes) or "." in lhs:
        raise Uncountable(f"einsum {equation!r} on {len(shapes)} operands")
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes, strict=True):
        for c, n in zip(term, shape, strict=True):
            sizes[c] = max(sizes.get(c, 1), int(n))  # a size-1 index broadcasts
    if not arrow:  # implicit output: the indices seen once
        out = "".join(c for c in sizes if lhs.count(c) == 1)
    total, left = 0.0, terms[0]
    for i, right in enumerate(terms[1:], 1):
        later = set(out).union(*terms[i + 1 :])
        total += 2.0 * math.prod(sizes[c] for c in set(left) | set(right))
        left = "".join(c for c in dict.fromkeys(left + right) if c in later)
    return total


# -- reading the shapes off an operator's arguments --------------------------------------------
Args = dict[str, Any]
"""An operator's arguments by their schema names (``input``, ``weight``, ``query``...)."""


def _shape(t: Any) -> list[int]:
    if getattr(t, "is_nested", False):
        raise Uncountable("a nested tensor has no single shape")
    return [int(n) for n in t.shape]


def _tokens(x: Any, width: int) -> int:
    """Positions of ``x`` (any layout, nested too) each of ``width`` features."""
    return int(x.numel()) // width if width else 0


def _sequences(x: Any) -> tuple[list[int], int]:
    """(sequence lengths, feature width) of a (B, L, E) or (L, E) input, or of a nested tensor
    of (L_i, E) sequences (the encoder fast path packs a padded batch into one)."""
    if getattr(x, "is_nested", False):
        sizes = [[int(n) for n in row] for row in x._nested_tensor_size().tolist()]
        if not sizes or any(len(s) != 2 for s in sizes):
            raise Uncountable("a nested tensor that is not a batch of (L, E) sequences")
        return [s[0] for s in sizes], sizes[0][1]
    d = _shape(x)
    if len(d) == 2:
        return [d[0]], d[1]
    if len(d) == 3:
        return [d[1]] * d[0], d[2]
    raise Uncountable(f"a sequence batch of {len(d)} dimensions")


def _linear(a: Args, out: Any) -> float:
    x, w = a.get("input", a.get("self")), a["weight"]
    out_f, in_f = _shape(w)
    return gemm_flops(_tokens(x, in_f), in_f, out_f)


def _conv(a: Args, out: Any, transposed: bool = False) -> float:
    from torch.utils.flop_counter import conv_flop_count

    transposed = bool(a.get("transposed", transposed))  # convolution(..., transposed, ...)
    x, w = _shape(a.get("input", a.get("self"))), _shape(a["weight"])
    o = _shape(out[0] if isinstance(out, tuple | list) else out)
    x = x if len(x) == len(w) else [1, *x]  # an unbatched input
    o = o if len(o) == len(w) else [1, *o]
    return float(conv_flop_count(x, w, o, transposed))


def _matmul(a: Args, out: Any) -> float:
    first = _shape(a["self"])
    return 2.0 * int(out.numel()) * first[-1] if first else 0.0


def _einsum(a: Args, out: Any) -> float:
    return einsum_flops(str(a["equation"]), [_shape(t) for t in a["tensors"]])


def _sdpa(a: Args, out: Any) -> float:
    q, k, v = _shape(a["query"]), _shape(a["key"]), _shape(a["value"])
    if len(q) < 2 or len(k) < 2 or len(v) < 2:
        raise Uncountable("attention inputs of fewer than 2 dimensions")
    return attention_flops(math.prod(q[:-2]), q[-2], k[-2], q[-1], v[-1])


def _sdpa_backward(a: Args, out: Any) -> float:
    # dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: twice the forward (torch's count)
    return 2.0 * _sdpa(a, out)


def _mha(a: Args, out: Any) -> float:
    q_lens, _ = _sequences(a["query"])
    kv_lens, _ = _sequences(a["key"])
    if len(kv_lens) != len(q_lens):
        raise Uncountable("query and key batches differ")
    return multi_head_attention_flops(q_lens, kv_lens, int(a["embed_dim"]))


def _encoder_layer(a: Args, out: Any) -> float:
    lens, _ = _sequences(a["src"])
    ffn = _shape(a["ffn_weight_1"])[0]
    return encoder_layer_flops(lens, int(a["embed_dim"]), ffn)


def _rnn(a: Args, out: Any) -> float:
    x = a.get("input", a.get("data"))
    weights = [_shape(w) for w in a.get("params", a.get("weight")) or []]
    if not weights or not weights[0][1:]:
        raise Uncountable("recurrent weights not found")
    return recurrent_flops(_tokens(x, weights[0][1]), weights)


def _mkldnn_rnn_layer(a: Args, out: Any, first: int = 0) -> float:
    w_ih, w_hh = _shape(a[f"weight{first}"]), _shape(a[f"weight{first + 1}"])
    return recurrent_flops(_tokens(a["input"], w_ih[1]), [w_ih, w_hh])


def _addmm(a: Args, out: Any) -> float:
    (m, k), (_, n) = _shape(a["mat1"]), _shape(a["mat2"])
    return gemm_flops(m, k, n)


def _mv(a: Args, out: Any) -> float:
    m, n = _shape(a.get("mat", a.get("self")))
    return gemm_flops(m, n, 1)


def _addbmm(a: Args, out: Any) -> float:
    (b, m, k), (_, _, n) = _shape(a["batch1"]), _shape(a["batch2"])
    return b * gemm_flops(m, k, n)


def _tensordot(a: Args, out: Any) -> float:
    shape = _shape(a["self"])
    contracted = math.prod(shape[int(d)] for d in a["dims_self"])
    return 2.0 * int(out.numel()) * contracted


FORMULAS: dict[str, Callable[[Args, Any], float]] = {
    "linear": _linear,
    "mkldnn_linear": _linear,
    "matmul": _matmul,
    "einsum": _einsum,
    "tensordot": _tensordot,
    "_addmm_activation": _addmm,
    "mv": _mv,
    "addmv": _mv,
    "addbmm": _addbmm,
    "dot": lambda a, out: 2.0 * int(a["self"].numel()),
    "vdot": lambda a, out: 2.0 * int(a["self"].numel()),
    "scaled_dot_product_attention": _sdpa,
    "_scaled_dot_product_attention_math": _sdpa,
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa,
    "_scaled_dot_product_fused_attention_overrideable": _sdpa,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_backward,
    "_scaled_dot_product_fused_attention_overrideable_backward": _sdpa_backward,
    "_native_multi_head_attention": _mha,
    "_transformer_encoder_layer_fwd": _encoder_layer,
    "lstm": _rnn,
    "gru": _rnn,
    "rnn_tanh": _rnn,
    "rnn_relu": _rnn,
    "_cudnn_rnn": _rnn,
    "miopen_rnn": _rnn,
    "_cudnn_rnn_backward": lambda a, out: 2.0 * _rnn(a, out),
    "mkldnn_rnn_layer": _mkldnn_rnn_layer,
    "mkldnn_rnn_layer_backward": lambda a, out: 2.0 * _mkldnn_rnn_layer(a, out, first=1),
}
"""Formulas by aten operator name (without namespace or overload). Backward formulas count
the two products per forward product (the input's gradient and the weight's)."""

_CONV_TRANSPOSED = ("conv_transpose", "convolution_transpose", "slow_conv_transpose")
# backward passes (not seen whole here), weight layout changes, conv_tbc's (time, batch,
# channel) layout, dtype conversions
_NOT_A_CONV = ("backward", "convert", "reorder", "conv_tbc", "_weight")


def _formula(base: str) -> Callable[[Args, Any], float] | None:
    got = FORMULAS.get(base)
    if got is not None:
        return got
    # conv1d/2d/3d, conv_transpose*, mkldnn_convolution, cudnn_convolution_relu, _conv_depthwise2d,
    # slow_conv3d...: forward convolutions, all read off (input, weight, output)
    if "conv" in base and not any(x in base for x in _NOT_A_CONV):
        transposed = any(t in base for t in _CONV_TRANSPOSED)
        return lambda a, out: _conv(a, out, transposed)
    return None


def composite_flops(name: str, args: Args, out: Any) -> float | None:
    """FLOPs of ``aten`` operator ``name`` (``aten::lstm.input``) called with ``args`` (by
    schema name) and returning ``out``; None when there is no formula for it (element-wise
    work, views, an operator of another namespace). Raises ``Uncountable`` (or whatever reading
    an odd argument raises) for a compute operator whose shapes cannot be read."""
    namespace, _, rest = name.partition("::")
    if namespace != "aten":
        return None
    formula = _formula(rest.split(".")[0])
    return formula(args, out) if formula is not None else None


def wants_flops(name: str) -> bool:
    """Whether ``name`` is an operator whose work is matrix products (one with a formula
    here), or a custom operator of another library (``flash_attn::...``, ``mylib::...``), whose
    work no formula here knows; collectives and profiler markers are neither."""
    namespace, _, rest = name.partition("::")
    if namespace == "aten":
        return _formula(rest.split(".")[0]) is not None
    skip = ("prims", "profiler", "c10d", "_c10d_functional", "_dtensor", "record_function")
    return bool(namespace) and namespace not in skip and "c10d" not in namespace
