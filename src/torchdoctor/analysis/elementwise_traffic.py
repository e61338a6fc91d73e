"""Bytes moved by eager elementwise kernels, from the shapes the trace recorded, and the rate
they reach against the device's memory bandwidth.

For each ``trace.columns.TRAFFIC_OPS`` operator (``aten::mul``, ``add``, ``copy_``, ``pow``,
``silu``, ...) whose ``Input Dims`` and ``Input type`` were recorded (``record_shapes=True``) and
whose kernels the trace links to it (kernel -> runtime call -> External id):

* bytes = every tensor input read once plus the output written once; the output has the
  broadcast shape of the inputs and the first input's element size; ``copy_(dst, src)`` reads
  the source and writes the destination. Caches aside, a kernel moves no less: the achieved
  rate is a lower bound;
* device time = the kernels launched under the operator's External id.

Kernels without a runtime call (the profiler drops some), ``torch.cat`` (its inputs are one
``TensorList`` with no dtype) and reductions are not covered; the result says how much of the
kernels' time it covers.
"""

# Annotations evaluated, not strings: typing.NamedTuple compiles each string one (0.4M
# instructions a field, at every start-up).

from typing import Any, NamedTuple

import numpy as np

from torchdoctor.analysis._join import time_by_recorded_op
from torchdoctor.trace.columns import ELEMENT_BYTES, TRAFFIC_OPS, decode_shapes
from torchdoctor.trace.table import TraceTable


# A named tuple: analyze imports it before any trace (rules/spec.py says what a dataclass costs).
class Traffic(NamedTuple):
    """Bytes and device time of the covered elementwise kernels."""

    bytes_moved: float
    kernel_ms: float
    """Device time of the kernels whose operator's bytes are known."""
    covered_share: float
    """``kernel_ms`` over the time of all the kernels asked about."""

    @property
    def achieved_bytes_per_s(self) -> float:
        return self.bytes_moved / (self.kernel_ms / 1e3) if self.kernel_ms > 0 else 0.0


def op_bytes(dims: list[Any], types: list[Any], name: str) -> float | None:
    """Bytes one elementwise operator call reads and writes (see the module), or None when a
    tensor's dtype is unknown or the shapes do not broadcast."""
    tensors = [(d, t) for d, t in zip(dims, types, strict=False) if isinstance(d, list) and d]
    if not tensors or any(not isinstance(t, str) or t not in ELEMENT_BYTES for _, t in tensors):
        return None
    if any(not all(isinstance(x, int) for x in d) for d, _ in tensors):
        return None
    sizes = [ELEMENT_BYTES[t] for _, t in tensors]
    numel = [int(np.prod(d)) for d, _ in tensors]
    if name == "aten::copy_" and len(tensors) >= 2:
        return float(numel[0] * sizes[0] + numel[1] * sizes[1])
    try:
        out = int(np.prod(np.broadcast_shapes(*[tuple(d) for d, _ in tensors])))
    except ValueError:
        return None
    return float(sum(n * s for n, s in zip(numel, sizes, strict=True)) + out * sizes[0])


def traffic_of(table: TraceTable, kernels: np.ndarray) -> Traffic | None:
    """The bytes the operators behind ``kernels`` (device rows) moved, over those kernels' time;
    None when no kernel links to a shape-recorded ``TRAFFIC_OPS`` operator."""
    if not table.shapes or not len(kernels):
        return None
    total_us = float(table.dur[kernels].sum())
    nbytes = us = 0.0
    for x, d in time_by_recorded_op(table, kernels, TRAFFIC_OPS).items():
        name, raw_dims, raw_types = table.shapes[x]
        shapes = decode_shapes(raw_dims, raw_types)
        b = op_bytes(*shapes, name) if shapes is not None else None
        if b is not None:
            nbytes, us = nbytes + b, us + d
    if us <= 0:
        return None
    return Traffic(nbytes, us / 1e3, us / total_us if total_us > 0 else 0.0)
