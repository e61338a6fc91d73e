"""What the inference families (``graphs.py``, ``serving.py``) measure with: an engine's steps,
the idle gaps the host leaves before launches, blocking copies' returns (not a family: the
package skips ``_`` modules). Imported only by a trace that has graphs or engine steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from torchdoctor.analysis import intervals as iv
from torchdoctor.analysis.breakdown import gap_causes

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis
    from torchdoctor.analysis.serving import ServingStep

HOST = ("host_overhead", "input_pipeline")
HOST_SYNC = ("host_overhead", "input_pipeline", "synchronization")


def engine(a: TraceAnalysis) -> str:
    """The serving engine that wrote the trace ("unknown" when none is recognised)."""
    if a.serving is not None:
        return a.serving.engine
    from torchdoctor.trace.server_steps import detect_engine

    return detect_engine(a.table)


def steps(a: TraceAnalysis, want: Callable[[ServingStep], bool]) -> list[int]:
    """The indices of the engine's steps ``want`` picks (none without engine steps)."""
    if a.serving is None:
        return []
    return [i for i, s in enumerate(a.serving.steps) if want(s)]


def _idle(a: TraceAnalysis, idx: list[int], parts: tuple[str, ...]) -> float:
    return sum(a.per_step[i].idle_ms.get(p, 0.0) for i in idx for p in parts)


def accounted(a: TraceAnalysis, idx: list[int]) -> float:
    """The accounted time (ms) of the engine steps ``idx``."""
    assert a.serving is not None
    return sum(a.serving.steps[i].accounted_ms for i in idx)


def _step_gaps(a: TraceAnalysis) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Every idle gap of every step (its end and its step's index) with its causes, in one pass.

    Summed as host_overhead + input_pipeline (+ synchronization) the causes do not depend on
    which gap opens a step, so one call over all steps' gaps gives each step's exact sums.
    """
    act = a.activity
    busy = act.busy()
    g0s, g1s, idx = [], [], []
    for i, (lo, hi) in enumerate(zip(a.steps.starts_us, a.steps.ends_us, strict=True)):
        g0, g1 = iv.gaps(busy, float(lo), float(hi))
        g0s.append(g0)
        g1s.append(g1)
        idx.append(np.full(len(g0), i))
    if not g0s or not sum(len(g) for g in g0s):
        return np.zeros(0), np.zeros(0, dtype=np.int64), {}
    g0, g1 = np.concatenate(g0s), np.concatenate(g1s)
    return g1, np.concatenate(idx), gap_causes((g0, g1), act, float(a.steps.starts_us[0]))


def _ends_at_eager_kernel(a: TraceAnalysis, g1: np.ndarray) -> np.ndarray:
    """For gaps ending at ``g1``: the work that ends it is a kernel run outside any graph (a
    copy or memset is not: inputs and outputs cross the host boundary in any case)."""
    act = a.activity
    out = np.zeros(len(g1), dtype=bool)
    if a.graphs is None or len(a.graphs.owner) != len(act.rows):
        return out
    k = np.searchsorted(act.start_us, g1, side="left")
    ok = k < len(act.start_us)
    out[ok] = (a.graphs.owner[k[ok]] < 0) & (act.cls[k[ok]] <= 1)  # compute, communication
    return out


def eager_host_ms(a: TraceAnalysis) -> float:
    """GPU idle waiting on the host, in gaps that end at eager (non-graph) kernels."""
    g1, _, causes = _step_gaps(a)
    if not len(g1):
        return 0.0
    eager = _ends_at_eager_kernel(a, g1)
    return float(sum(causes[p][eager].sum() for p in HOST)) / 1e3


def host_splits(
    a: TraceAnalysis, parts: tuple[str, ...] = HOST_SYNC, skip_eager_kernels: bool = False
) -> list[tuple[float, float]]:
    """Per step: (idle of ``parts`` in gaps ending before the step's first blocking
    device-to-host copy returned, in gaps ending after it), ms; all "before" without such a
    copy. The gaps after it are the blocking copy's (the CPU could not queue work ahead).
    ``skip_eager_kernels`` leaves out the gaps before kernels run outside graphs (those are
    ``low-graph-coverage``'s)."""
    g1, idx, causes = _step_gaps(a)
    out = [(0.0, 0.0)] * len(a.steps)
    if not len(g1):
        return out
    host = np.sum([causes[p] for p in parts], axis=0)
    if skip_eager_kernels:
        host = np.where(_ends_at_eager_kernel(a, g1), 0.0, host)
    back = np.array(
        [
            _first_copy_return(a, float(lo), float(hi))
            for lo, hi in zip(a.steps.starts_us, a.steps.ends_us, strict=True)
        ]
    )
    after = g1 > back[idx]
    n = len(a.steps)
    before_ms = np.bincount(idx[~after], host[~after], minlength=n) / 1e3
    after_ms = np.bincount(idx[after], host[after], minlength=n) / 1e3
    return [(float(b), float(x)) for b, x in zip(before_ms, after_ms, strict=True)]


def _first_copy_return(a: TraceAnalysis, lo: float, hi: float) -> float:
    copies = a.serving.d2h_copies_us if a.serving is not None else ()
    mine = [back for t0, back in copies if lo <= t0 < hi]
    return min(mine) if mine else np.inf


def overlap_scheduling(a: TraceAnalysis) -> bool:
    """The engine already overlaps scheduling with the GPU: SGLang's overlap scheduler resolves
    the previous batch's tokens on the device (``resolve_future_token_ids``)."""
    return any("resolve_future_token_ids" in n for n in a.table.names)


def host_share(a: TraceAnalysis, idx: list[int]) -> float:
    acc = accounted(a, idx)
    return _idle(a, idx, HOST_SYNC) / acc if acc > 0 else 0.0


def pow2_floor(x: float) -> int:
    return 1 << max(int(np.floor(np.log2(max(x, 1.0)))), 0)
