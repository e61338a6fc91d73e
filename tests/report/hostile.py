"""A synthetic trace whose names try to break out of the HTML page, with memory events, a
DataLoader wait and a sync stall: a case the corpus does not have."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.core.synth import CPU_PID, CPU_TID, annotation, cpu_op, launched, runtime, write_trace

HOSTILE_KERNEL = "<script>window.__pwned=1</script>gemm_kernel"
HOSTILE_OP = '" onerror="window.__pwned=2" x="'
HOSTILE_IMG = "<img src=x onerror=window.__pwned=3>"
HOSTILE_LINK = "</script><script>window.__pwned=4</script>"
STEP_US = 10_000.0


def memory_event(ts: float, allocated: int, reserved: int) -> dict[str, Any]:
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "s": "t",
        "name": "[memory]",
        "pid": CPU_PID,
        "tid": CPU_TID,
        "ts": ts,
        "args": {
            "Device Type": 1,
            "Device Id": 0,
            "Bytes": 1 << 20,
            "Total Allocated": allocated,
            "Total Reserved": reserved,
        },
    }


def hostile_events(
    steps: int = 4, wait_us: float = 3000.0, step_us: float = STEP_US
) -> list[dict[str, Any]]:
    """Steps of: a DataLoader wait, two hostile kernels, a blocking sync, memory events."""
    ev: list[dict[str, Any]] = []
    corr = 1
    for n in range(steps):
        t0 = 1_000_000.0 + n * step_us
        ev.append(annotation(f"ProfilerStep#{n}", t0, step_us - 1))
        ev.append(
            cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, wait_us)
        )
        t = t0 + wait_us + 10
        ev.append(cpu_op(HOSTILE_OP, t, 400.0))
        ev += launched(HOSTILE_KERNEL, t + 10, t + 30, 2500.0, corr)
        ev += launched(HOSTILE_IMG, t + 50, t + 2540, 1500.0, corr + 1)
        ev.append(runtime("cudaDeviceSynchronize", t + 60, 4000.0, corr + 2))
        ev.append(cpu_op(HOSTILE_LINK, t + 4100, 200.0))
        ev += launched("elementwise_kernel", t + 4120, t + 4140, 300.0, corr + 3)
        for k in range(5):
            ev.append(memory_event(t0 + k * 1500, (100 + 20 * k + n) << 20, 512 << 20))
        corr += 4
    return ev


def write_hostile_trace(path: Path) -> Path:
    return write_trace(
        path,
        hostile_events(),
        devices=[{"id": 0, "name": "<b>Fake GPU</b>", "computeMajor": 8, "computeMinor": 0}],
    )
