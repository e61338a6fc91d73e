"""One dominant operator whose FLOPs could not be counted, taken as the step's compute.

``check`` counts FLOPs from each operator's inputs (``capture/op_flops.py``); a compute
operator it has no formula for (a custom operator: ``flash_attn::...``, ``mylib::fused_mlp``),
or whose shapes it could not read, counts none and is listed in the roofline's
``work.uncounted_compute_ops``. Left at zero FLOPs, a model that spends its step in one such
operator would look as if it ran at 1% of its roofline. When one of them holds
``DOMINANT_UNCOUNTED_OP`` of the time inside torch operators (the line table), the step's account
takes that time as explained compute, and says so in its evidence (``assumed_compute``): the
operator's efficiency is then unknown, not judged. A custom operator's time is that of the
profiled operators inside it (the ones the counting mode never saw). Plain data; no torch import.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from torchdoctor.record.values import as_dict, as_number
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


def _op_times(acc: Account) -> dict[str, float]:
    """ms per step of each operator under the line table's rows (names without overload)."""
    ops_ms: dict[str, float] = {}
    for row in acc.lines.rows:  # the operators under each line's self time
        for name, ms in row.ops:
            ops_ms[_base(name)] = ops_ms.get(_base(name), 0.0) + ms
    return ops_ms


def _candidates(work: dict[str, Any], ops_ms: dict[str, float]) -> dict[str, float]:
    """ms per step of each uncounted compute operator. An aten operator is profiled under its
    own name; a custom operator is not (the line table keeps ``aten::`` operators, its
    ``aten::mm`` shows instead), so the custom operators share the time of the profiled
    operators the counting mode never saw at its level (``ops_seen``): they ran inside an
    operator it saw whole."""
    uncounted = as_dict(work.get("uncounted_compute_ops"))
    out = {n: ops_ms.get(_base(n), 0.0) for n in uncounted if n.startswith("aten::")}
    custom = sorted(n for n in uncounted if not n.startswith("aten::"))
    seen = work.get("ops_seen")
    if custom and isinstance(seen, list):
        seen_set = {str(n) for n in seen}
        out[", ".join(custom)] = sum(ms for n, ms in ops_ms.items() if n not in seen_set)
    return out


def assumed_compute(acc: Account) -> AssumedCompute | None:
    """The uncounted compute operator that holds ``DOMINANT_UNCOUNTED_OP`` or more of the
    sampled time inside torch operators, or None (nothing uncounted, not sampled, not dominant)."""
    work = acc.roofline.work
    ops_ms = _op_times(acc)
    total = sum(ops_ms.values())
    found = _candidates(work, ops_ms)
    if not found or total <= 0:
        return None
    op = max(found, key=lambda n: found[n])
    share = found[op] / total
    if share < th.DOMINANT_UNCOUNTED_OP:
        return None
    uncounted = as_dict(work.get("uncounted_compute_ops"))
    calls = sum(
        int(v) for k, v in uncounted.items() if k in op.split(", ") and as_number(v) is not None
    )
    return AssumedCompute(
        op=op,
        calls=calls,
        share_of_ops=share,
        ms=share * acc.lines.categories.get("torch ops", 0.0),
        why=(
            f"{op} holds {share:.0%} of the time inside torch operators and its FLOPs could "
            "not be counted from its inputs: its time is taken as compute, its efficiency unknown"
        ),
    )
