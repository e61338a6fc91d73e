"""Synthetic GPU traces of one data-parallel job, one file per rank, on one shared timeline.

Each step: every rank runs its compute kernel (its own length), then enters an AllReduce; the
AllReduce kernel starts when the rank arrives and ends for everyone COMM_US after the last
arrival. So a rank's waiting per step is ``last arrival + COMM_US - its arrival`` and its own work
is exactly its compute plus the fixed margins (``WORK_MARGIN_US``).
"""

from __future__ import annotations

from pathlib import Path

from tests.core.synth import annotation, launched, write_trace

COMM_US = 100.0
LEAD_US = 10.0  # step start to compute start, and AllReduce end to step end
WORK_MARGIN_US = 2 * LEAD_US
GEMM = "volta_sgemm_128x64_nn"
ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float"


def write_job(
    folder: Path,
    compute_us: list[list[float]],
    clock_us: dict[int, float] | None = None,
    stop_after: dict[int, int] | None = None,
    names: list[str] | None = None,
    dist_info: bool = True,
) -> list[Path]:
    """Write one trace per rank; ``compute_us[step][rank]`` is that rank's compute in that step.

    ``clock_us`` shifts a rank's clock; ``stop_after[r] = k`` ends rank r's trace after step k
    (the others then wait in step k+1's AllReduce until ``stall_us`` later).
    """
    world = len(compute_us[0])
    clock_us, stop_after = clock_us or {}, stop_after or {}
    events: list[list[dict]] = [[] for _ in range(world)]
    t = 1000.0
    for k, per_rank in enumerate(compute_us):
        alive = [r for r in range(world) if stop_after.get(r, len(compute_us)) >= k]
        arrive = {r: t + LEAD_US + per_rank[r] for r in alive}
        stalled = len(alive) < world
        end = max(arrive.values()) + (50_000.0 if stalled else COMM_US)
        for r in alive:
            ev = events[r]
            corr = 10 * k + 1
            ev.append(annotation(f"ProfilerStep#{k}", t, end + LEAD_US - t))
            ev += launched(GEMM, t + 1, t + LEAD_US, per_rank[r], corr=corr)
            ev += launched(
                ALLREDUCE, arrive[r] - 6, arrive[r], end - arrive[r], corr=corr + 1, stream=13
            )
        t = end + LEAD_US
    paths = []
    for r, ev in enumerate(events):
        if not ev:
            continue
        shift = clock_us.get(r, 0.0)
        for e in ev:
            e["ts"] += shift
        name = names[r] if names else f"rank{r}.json"
        top = (
            {"distributedInfo": {"rank": r, "world_size": world, "backend": "nccl"}}
            if dist_info
            else {}
        )
        paths.append(write_trace(folder / name, ev, **top))
    return paths
