"""One dominant operator whose FLOPs could not be counted, taken as the step's compute.

``check`` counts FLOPs from each operator's inputs (``capture/op_flops.py``); a compute
operator it has no formula for (a custom operator: ``flash_attn::...``, ``mylib::fused_mlp``),
or whose shapes it could not read, counts none and is listed in the roofline's
``work.uncounted_compute_ops``. Left at zero FLOPs, a model that spends its step in one such
operator would look as if it ran at 1% of its roofline. When one of them holds
``DOMINANT_UNCOUNTED_OP`` of the time inside torch operators (the line table), the step's account
takes that time as explained compute, and says so in its evidence (``assumed_compute``): the
operator's efficiency is then unknown, not judged. Plain data; no torch import.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from torchdoctor.record.values import as_dict
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.account_inputs import Account


@dataclass(frozen=True)
class AssumedCompute:
    """The operator taken as compute, and the time it explains."""

    op: str
    """The operator as the counting mode saw it (``mylib::fused_mlp``, ``aten::einsum``)."""
    calls: int
    """Its calls in the counted step."""
    share_of_ops: float
    """Its share of the sampled time inside torch operators."""
    ms: float
    """ms per step taken as explained: that share of the torch operators' time."""
    why: str

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the account's evidence."""
        return {**asdict(self), "share_of_ops": round(self.share_of_ops, 4)}


def _base(name: str) -> str:
    """``aten::lstm.input`` -> ``aten::lstm`` (the line table names operators without overload)."""
    namespace, _, rest = name.partition("::")
    return f"{namespace}::{rest.split('.', 1)[0]}" if rest else name


def assumed_compute(acc: Account) -> AssumedCompute | None:
    """The uncounted compute operator that holds ``DOMINANT_UNCOUNTED_OP`` or more of the
    sampled time inside torch operators, or None (nothing uncounted, not sampled, not dominant)."""
    work = as_dict(acc.roofline.raw.get("work"))
    uncounted = as_dict(work.get("uncounted_compute_ops"))
    ops_ms: dict[str, float] = {}
    for row in acc.lines.rows:  # the operators under each line's self time
        for name, ms in row.ops:
            ops_ms[_base(name)] = ops_ms.get(_base(name), 0.0) + ms
    total = sum(ops_ms.values())
    if not uncounted or total <= 0:
        return None
    op = max(uncounted, key=lambda n: ops_ms.get(_base(n), 0.0))
    share = ops_ms.get(_base(op), 0.0) / total
    if share < th.DOMINANT_UNCOUNTED_OP:
        return None
    calls = uncounted[op]
    return AssumedCompute(
        op=op,
        calls=int(calls) if isinstance(calls, int | float) else 0,
        share_of_ops=share,
        ms=share * acc.lines.categories.get("torch ops", 0.0),
        why=(
            f"{op} holds {share:.0%} of the time inside torch operators and its FLOPs could "
            "not be counted from its inputs: its time is taken as compute, its efficiency unknown"
        ),
    )
