"""Synchronisation stalls: the CPU blocks on the device (``torch.cuda.synchronize``, ``.item()``,
``.cpu()``, a blocking copy) and the queue drains, so the device idles until the CPU queues
the next work."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchdoctor.analysis.gpu_activity import SYNC_CALLS
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families._common import count_names
from torchdoctor.rules.spec import (
    Details,
    FindingSpec,
    Gate,
    Measured,
    SeverityPolicy,
    TraceRule,
    static,
)
from torchdoctor.trace.kinds import Kind

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis

ITEM_OPS = ("aten::item", "aten::_local_scalar_dense")

SPEC = FindingSpec(
    id="sync-stalls",
    label="synchronisation stalls",
    title="Synchronisation stalls: {ms:.1f} ms per step ({share:.0%}) of GPU idle after the "
    "CPU blocked on the device",
    severity=SeverityPolicy(th.SYNC_WARN, th.SYNC_CRITICAL),
    threshold=th.SYNC_WARN,
    gates=(Gate("ms", th.SYNC_MIN_MS),),
    fix=static(fx.SYNC_STALLS),
    explanation="A synchronising call (.item(), .cpu(), torch.cuda.synchronize, a blocking "
    "copy) makes the CPU wait until the GPU finishes, so nothing is queued when it does.",
    doc_url=f"{fx.DOCS}/generated/torch.cuda.set_sync_debug_mode.html",
    codemods=("sync-every-n",),
)


def measure(a: TraceAnalysis) -> Measured | None:
    """The device idle the breakdown puts after a synchronising call (``synchronization``):
    its share of the step, and its ms per step for the gate (one synchronize at the end of a
    run is not a stall)."""
    if not a.has_gpu or not a.mean_step_ms:
        return None
    ms = a.per_step_ms(a.total.idle_ms.get("synchronization", 0.0))
    share = ms / a.mean_step_ms

    def details() -> Details:  # counting the calls walks the table: only for a finding
        calls = count_names(a, lambda n: n in SYNC_CALLS, Kind.RUNTIME, Kind.DRIVER)
        items = count_names(a, lambda n: n in ITEM_OPS, Kind.CPU_OP)
        return Details(
            evidence={"sync_calls": calls, "item_calls": items.get("aten::item", 0)},
            where=tuple(sorted(calls, key=calls.__getitem__, reverse=True)),
        )

    return Measured(
        value=share,
        saving_ms=ms,
        title={"ms": ms, "share": share},
        evidence={"sync_idle_ms_per_step": round(ms, 3), "share_of_step": round(share, 4)},
        gates={"ms": ms},
        details=details,
    )


RULES = (TraceRule(SPEC, measure),)
