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


def unexplained_fix(category: str, site: str, ops: list[str]) -> str:
    """What to look at first, from what runs under the top line."""
    if category == "torch ops":
        op = ops[0] if ops else "its operators"
        if any(o.startswith(SPATIAL_OPS) for o in ops[:2]):
            return (
                f"# {site}: most of the time is in {op}, far below this machine's rates. "
                "Pooling and\n# convolution kernels are often several times faster in "
                "channels_last (NHWC):\n"
                "model = model.to(memory_format=torch.channels_last)\n"
                "images = images.contiguous(memory_format=torch.channels_last)  # each 4-D batch\n"
                "# or torch.compile(model) to fuse them"
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
