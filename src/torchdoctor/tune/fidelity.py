"""The fidelity gate: does a candidate's loss trajectory stay with the fp32 eager reference?

Every trial trains the same steps from the same seed on the same batches in the same order, and
records the loss of every step. The reference is the baseline trial (fp32, eager, the default
optimizer, data in the main process). See docs/tune.md for why each tolerance is what it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Largest allowed relative deviation of the loss from the reference, per precision.
TOLERANCE: dict[str, float] = {
    # Same arithmetic, different summation order (fused/foreach optimizers, compiled kernels,
    # accumulated micro-batches): differences start at ~1e-7 and grow a little per step.
    "fp32": 1e-3,
    # TF32 matmuls round inputs to a 10-bit mantissa (unit roundoff 4.9e-4).
    "tf32": 1e-2,
    # bf16 has an 8-bit mantissa (unit roundoff 3.9e-3); autocast keeps reductions in fp32.
    "bf16-mixed": 5e-2,
    # fp16 rounds like TF32, but the GradScaler skips the first steps while it finds its scale,
    # which shifts the trajectory by a step or two.
    "fp16-mixed": 5e-2,
}

_ABS_FLOOR = 1e-6  # below this a loss is "zero": compare absolutely, not relatively


@dataclass(frozen=True)
class Fidelity:
    """The gate's decision for one candidate (a trial, or a ``fix --prove`` arm against the
    original), with the numbers behind it."""

    ok: bool
    """True when the candidate is faithful."""
    max_rel_dev: float
    """Largest |candidate - reference| / |reference| over the compared steps."""
    worst_step: int
    """Step (0-based) where that deviation occurred, -1 when nothing was compared."""
    tolerance: float
    """The tolerance for the candidate's precision."""
    steps: int
    """Steps compared (0: no loss recorded, nothing compared)."""
    reason: str = ""
    """Why it was rejected, with the numbers ('' when faithful)."""


def check(
    reference: Sequence[float], candidate: Sequence[float], precision: str, *, steps: int
) -> Fidelity:
    """Compare the first ``steps`` losses of ``candidate`` with ``reference``.

    Rejects non-finite losses anywhere in the candidate, a trajectory shorter than ``steps``, and
    any step whose relative deviation exceeds ``TOLERANCE[precision]``.
    """
    tol = TOLERANCE.get(precision, TOLERANCE["fp32"])
    for i, c in enumerate(candidate):
        if not math.isfinite(c):
            return Fidelity(False, math.inf, i, tol, i + 1, f"loss is {c} at step {i}")
    n = min(steps, len(reference))
    if len(candidate) < n:
        return Fidelity(
            False,
            math.inf,
            len(candidate),
            tol,
            len(candidate),
            f"only {len(candidate)} of {n} reference steps ran",
        )
    worst, worst_step = 0.0, -1
    for i in range(n):
        dev = abs(candidate[i] - reference[i]) / max(abs(reference[i]), _ABS_FLOOR)
        if dev > worst:
            worst, worst_step = dev, i
    if worst > tol:
        reason = (
            f"loss deviates {worst:.2e} from the fp32 reference at step {worst_step} "
            f"({candidate[worst_step]:.6g} vs {reference[worst_step]:.6g}; "
            f"tolerance for {precision}: {tol:.0e})"
        )
        return Fidelity(False, worst, worst_step, tol, n, reason)
    return Fidelity(True, worst, worst_step, tol, n)
