"""What to look at first at a line, from what runs under it: the unexplained-time finding's fix
(``rules/families/unexplained.py``) and ``check``'s fitted input-pipeline fix use it."""

from __future__ import annotations

SPATIAL_OPS = (
    "aten::max_pool",
    "aten::avg_pool",
    "aten::adaptive_",
    "aten::conv",
    "aten::mkldnn_conv",
    "aten::_convolution",
    "aten::convolution",
    "aten::batch_norm",
    "aten::native_batch_norm",
)
"""Operators on 4-D images whose CPU and GPU kernels depend on the memory format: NCHW
max pooling ran about 10x slower than channels_last on one CPU (AMD EPYC, torch 2.13, one
thread, a 64x32x32x32 batch: median 10.6x over 6 interleaved rounds, 2.4-12.1x)."""


RECURRENT_OPS = (
    "aten::lstm",
    "aten::gru",
    "aten::rnn_",
    "aten::mkldnn_rnn",
    "aten::_cudnn_rnn",
    "aten::miopen_rnn",
)
"""The fused recurrent operators (forward and backward): one call runs the whole sequence,
one time step after another."""


def unexplained_fix(category: str, site: str, ops: list[str]) -> str:
    """What to look at first, from what runs under the top line."""
    if category == "torch ops":
        op = ops[0] if ops else "its operators"
        if ops and ops[0].startswith(SPATIAL_OPS) and not any("1d" in o for o in ops[:2]):
            # Said in words: the model's and the batch's names are not known here, and the
            # conversion belongs once before the loop, not at the line that holds the time
            # (pasted there it converts the model every step).
            return (
                f"# {site}: most of the time is in {op}, far below this machine's rates. "
                "Pooling and\n# convolution kernels on 4-D images are often several times "
                "faster in channels_last (NHWC):\n"
                "# once, after the model is built and before the loop: "
                "model = model.to(memory_format=torch.channels_last)\n"
                "# and each 4-D batch as it arrives: "
                "x = x.contiguous(memory_format=torch.channels_last)\n"
                "# or torch.compile(model) to fuse them"
            )
        if ops and ops[0].startswith(RECURRENT_OPS):
            return (
                f"# {site}: most of the time is in {op}, far below this machine's rates: a "
                "recurrent layer steps\n# through the sequence one time step at a time, each "
                "a product of (batch x hidden) matrices;\n# a larger batch fills them "
                "(torch.compile does not fuse the recurrent kernel)"
            )
        return (
            f"# {site}: most of the time is in {op}, far below this machine's rates: fewer, "
            "larger operators (batch the work, vectorise loops over tensors), or "
            "torch.compile(model) to fuse them"
        )
    if category == "I/O":
        return f"# {site}: file or socket I/O in the step: do it every N steps, or in a background thread"
    if category == "sleep/wait":
        return (
            f"# {site}: the step sleeps or waits (a lock, a queue, another thread or process): "
            "remove the wait or overlap it with compute"
        )
    if category == "gc":
        return f"# {site}: garbage collection: gc.freeze() after set-up, or fewer Python objects per step"
    return (
        f"# {site}: plain Python in the step (no torch operators under it): vectorise it "
        "with tensor operations, move it out of the loop, or run it every N steps"
    )
