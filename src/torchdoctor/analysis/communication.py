"""Communication: collective kernel time, how much of it hides under compute, and what is exposed.

Exposed communication is collective time during which no compute kernel runs: the step waits for
it. It equals the breakdown's exclusive ``communication`` part by construction.

The same numbers per collective kind tell FSDP's two costs apart: the parameter all-gather before
each unit's forward and backward (exposed when it is not prefetched under the previous unit's
compute) and the gradient reduce-scatter after its backward.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from torchdoctor.analysis import intervals as iv
from torchdoctor.analysis.gpu_activity import CPU_COLLECTIVE, GpuActivity
from torchdoctor.trace.arrays import distinct, unique_codes
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.steps import Steps
from torchdoctor.trace.table import TraceTable

FSDP_MARKERS = ("FSDP::", "fsdp::")
"""Name prefixes of the annotations and operators FSDP2 (``fully_shard``) records."""


@dataclass(frozen=True)
class CommStats:
    """Collective communication over the analysed steps (milliseconds, summed over steps)."""

    comm_ms: float
    """Time at least one communication kernel ran (union over streams)."""
    overlapped_ms: float
    """Part of comm_ms during which a compute kernel also ran."""
    exposed_ms: float
    """comm_ms - overlapped_ms: communication the step waited for."""
    exposed_ms_per_step: list[float]
    kernels: int
    """Number of communication kernels."""
    collectives: dict[str, int]
    """Count per collective kind (AllReduce, AllGather, ReduceScatter, ...)."""
    world_size: int | None
    backend: str | None
    by_kind: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per collective kind (AllGather, ReduceScatter, AllReduce, ...): ``comm_ms`` and
    ``exposed_ms`` summed over steps. In a CPU-only trace, time in CPU collectives of that kind
    (gloo blocks the training thread, so all of it counts as exposed)."""
    fsdp: bool = False
    """The trace was recorded under FSDP (its ``FSDP::`` annotations or ``fsdp::`` operators)."""

    def exposed_ms_of(self, *kinds: str) -> float:
        """Exposed milliseconds (summed over steps) of the given collective kinds."""
        return sum(self.by_kind.get(k, {}).get("exposed_ms", 0.0) for k in kinds)

    @property
    def overlap_share(self) -> float:
        """Fraction of communication hidden under compute (0 when there is none)."""
        return self.overlapped_ms / self.comm_ms if self.comm_ms > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["overlap_share"] = self.overlap_share
        return d


def analyze_communication(table: TraceTable, steps: Steps, act: GpuActivity) -> CommStats:
    """Communication time, overlap with compute and exposed time, per step and summed."""
    comm_all = act.busy("communication")
    compute_all = act.busy("compute")
    comm_ms = overlap_ms = 0.0
    exposed: list[float] = []
    for lo, hi in zip(steps.starts_us, steps.ends_us, strict=True):
        comm = iv.clip(comm_all, float(lo), float(hi))
        both = iv.intersect(comm, iv.clip(compute_all, float(lo), float(hi)))
        c, o = iv.total(comm) / 1000.0, iv.total(both) / 1000.0
        comm_ms += c
        overlap_ms += o
        exposed.append(c - o)
    rows = act.rows[act.cls == 1]
    counts: Counter[str] = Counter()
    codes, _, per_code = unique_codes(table.name[rows])
    for code, n in zip(codes, per_code, strict=True):
        counts[_collective(table.names[int(code)])] += int(n)
    return CommStats(
        comm_ms=comm_ms,
        overlapped_ms=overlap_ms,
        exposed_ms=comm_ms - overlap_ms,
        exposed_ms_per_step=exposed,
        kernels=len(rows),
        collectives=dict(counts),
        world_size=table.meta.world_size,
        backend=table.meta.backend,
        by_kind=_by_kind(table, steps, act),
        fsdp=len(table.codes_matching(lambda n: n.startswith(FSDP_MARKERS))) > 0,
    )


def _by_kind(table: TraceTable, steps: Steps, act: GpuActivity) -> dict[str, dict[str, float]]:
    """``comm_ms`` and ``exposed_ms`` per collective kind, from kernels or CPU collectives."""
    if len(act.rows):
        rows = act.cls == 1
        kinds = np.array([_collective(table.names[int(c)]) for c in table.name[act.rows[rows]]])
        spans = {
            k: iv.union(act.start_us[rows][kinds == k], act.end_us[rows][kinds == k])
            for k in distinct(kinds)
        }
        return {k: _exposed(v, act.busy("compute"), steps) for k, v in spans.items()}
    out: dict[str, dict[str, float]] = {}
    cpu = table.rows_named(
        lambda n: bool(CPU_COLLECTIVE.match(n)), Kind.CPU_OP, Kind.USER_ANNOTATION
    )
    kinds = np.array([_collective(table.names[int(c)]) for c in table.name[cpu]])
    for k in distinct(kinds):
        r = cpu[kinds == k]
        span = iv.union(table.ts[r], table.ts[r] + table.dur[r])
        out[str(k)] = _exposed(span, iv.EMPTY, steps)
    return out


def _exposed(comm_all: iv.Intervals, compute_all: iv.Intervals, steps: Steps) -> dict[str, float]:
    comm_ms = exposed_ms = 0.0
    for lo, hi in zip(steps.starts_us, steps.ends_us, strict=True):
        comm = iv.clip(comm_all, float(lo), float(hi))
        both = iv.intersect(comm, iv.clip(compute_all, float(lo), float(hi)))
        c = iv.total(comm) / 1000.0
        comm_ms += c
        exposed_ms += c - iv.total(both) / 1000.0
    return {"comm_ms": comm_ms, "exposed_ms": exposed_ms}


def _collective(name: str) -> str:
    low = name.lower().replace("_", "")
    for key, label in (
        ("allreduce", "AllReduce"),
        ("allgather", "AllGather"),
        ("reducescatter", "ReduceScatter"),
        ("alltoall", "AllToAll"),
        ("broadcast", "Broadcast"),
        ("sendrecv", "SendRecv"),
        ("send", "Send"),
        ("recv", "Recv"),
        ("reduce", "Reduce"),
    ):
        if key in low:
            return label
    return "other"
