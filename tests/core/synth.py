"""Build small synthetic Kineto traces for tests (written to disk and loaded like real ones)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

GPU_PID, CPU_PID, CPU_TID, STREAM = 0, 100, 100, 7


def cpu_op(name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": CPU_PID,
        "tid": CPU_TID,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def annotation(name: str, ts: float, dur: float) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": name,
        "pid": CPU_PID,
        "tid": CPU_TID,
        "ts": ts,
        "dur": dur,
    }


def runtime(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": CPU_PID,
        "tid": CPU_TID,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr},
    }


def kernel(
    name: str,
    ts: float,
    dur: float,
    corr: int,
    stream: int = STREAM,
    cat: str = "kernel",
    **args: Any,
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": GPU_PID,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr, "stream": stream, "device": 0, **args},
    }


def launched(
    name: str, launch_ts: float, start: float, dur: float, corr: int, **kw: Any
) -> list[dict[str, Any]]:
    """A cudaLaunchKernel call (5 µs) and the kernel it launched."""
    return [runtime("cudaLaunchKernel", launch_ts, 5.0, corr), kernel(name, start, dur, corr, **kw)]


def write_trace(path: Path, events: list[dict[str, Any]], **top: Any) -> Path:
    """Write a trace file (.json or .json.gz by suffix) with the given events."""
    doc = {
        "schemaVersion": 1,
        "deviceProperties": top.pop("devices", []),
        **top,
        "traceEvents": events,
    }
    data = json.dumps(doc).encode()
    if path.suffix == ".gz":
        data = gzip.compress(data)
    path.write_bytes(data)
    return path
