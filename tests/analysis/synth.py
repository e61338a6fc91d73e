"""Build small TraceTables by hand for edge cases (no file, no loader)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.steps import Steps
from torchdoctor.trace.table import MemoryEvents, TraceMeta, TraceTable

V100 = {
    "id": 0,
    "name": "Tesla V100-SXM2-16GB",
    "computeMajor": 7,
    "computeMinor": 0,
    "totalGlobalMem": 16 * 2**30,
}
A100 = {
    "id": 0,
    "name": "NVIDIA A100-SXM4-40GB",
    "computeMajor": 8,
    "computeMinor": 0,
    "totalGlobalMem": 40 * 2**30,
}


@dataclass
class Ev:
    """One complete event; times in microseconds."""

    kind: Kind
    name: str
    ts: float
    dur: float
    tid: int = 1
    pid: int = 1
    corr: int = -1
    ext_id: int = -1
    stream: int = -1
    device: int = -1


def kernel(name: str, ts: float, dur: float, corr: int = -1, stream: int = 7) -> Ev:
    return Ev(Kind.KERNEL, name, ts, dur, tid=stream, pid=0, corr=corr, stream=stream, device=0)


def launch(ts: float, dur: float, corr: int, name: str = "cudaLaunchKernel", **kw: Any) -> Ev:
    return Ev(Kind.RUNTIME, name, ts, dur, corr=corr, **kw)


def op(name: str, ts: float, dur: float, tid: int = 1, ext_id: int = -1) -> Ev:
    return Ev(Kind.CPU_OP, name, ts, dur, tid=tid, ext_id=ext_id)


@dataclass
class Mem:
    """Memory events as columns."""

    ts: list[float] = field(default_factory=list)
    allocated: list[int] = field(default_factory=list)
    reserved: list[int] = field(default_factory=list)
    device_id: list[int] = field(default_factory=list)
    device_type: list[int] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)


def make_table(
    events: list[Ev],
    devices: list[dict[str, Any]] | None = None,
    memory: Mem | None = None,
    input_types: dict[int, bytes] | None = None,
) -> TraceTable:
    """A TraceTable holding ``events`` sorted by start, like the loader's output."""
    evs = sorted(events, key=lambda e: e.ts)
    names = list(dict.fromkeys(e.name for e in evs))
    pids = list(dict.fromkeys(e.pid for e in evs))
    tids = list(dict.fromkeys(e.tid for e in evs))
    m = memory or Mem()
    return TraceTable(
        meta=TraceMeta("synthetic", None, None, None, devices or [], {}, 0),
        base_us=0.0,
        ts=np.array([e.ts for e in evs], dtype=np.float64),
        dur=np.array([e.dur for e in evs], dtype=np.float64),
        kind=np.array([int(e.kind) for e in evs], dtype=np.uint8),
        name=np.array([names.index(e.name) for e in evs], dtype=np.int32),
        names=names,
        pid=np.array([pids.index(e.pid) for e in evs], dtype=np.int32),
        pids=list(pids),
        tid=np.array([tids.index(e.tid) for e in evs], dtype=np.int32),
        tids=list(tids),
        corr=np.array([e.corr for e in evs], dtype=np.int64),
        ext_id=np.array([e.ext_id for e in evs], dtype=np.int64),
        device=np.array([e.device for e in evs], dtype=np.int16),
        stream=np.array([e.stream for e in evs], dtype=np.int32),
        nbytes=np.full(len(evs), -1, dtype=np.int64),
        memory=MemoryEvents(
            ts=np.array(m.ts, dtype=np.float64),
            total_allocated=np.array(m.allocated, dtype=np.int64),
            total_reserved=np.array(m.reserved, dtype=np.int64),
            device_id=np.array(m.device_id, dtype=np.int16),
            device_type=np.array(m.device_type, dtype=np.int16),
            nbytes=np.array(m.nbytes, dtype=np.int64),
        ),
        input_types=input_types or {},
    )


def steps_of(*bounds: tuple[float, float]) -> Steps:
    """Step windows from (start, end) pairs in microseconds."""
    return Steps(
        "profiler-step",
        list(range(len(bounds))),
        np.array([b[0] for b in bounds], dtype=np.float64),
        np.array([b[1] for b in bounds], dtype=np.float64),
        "synthetic",
    )


EVERYTHING = steps_of((-1e15, 1e15))
"""One window around any trace: analyses then cover every event."""
