"""Small synthetic snapshots for edge cases, in the shape torch writes them."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

MIB = 1 << 20
CPP = {"name": "c10::cuda::CUDACachingAllocator::malloc", "filename": "??", "line": 0}
TORCH = {
    "name": "_call_impl",
    "filename": "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py",
    "line": 1787,
}


def frame(filename: str, line: int, name: str) -> dict[str, Any]:
    return {"name": name, "filename": filename, "line": line}


def user_stack(filename: str, line: int, name: str = "forward") -> list[dict[str, Any]]:
    return [CPP, frame(filename, line, name), TORCH, frame("/home/me/train.py", 90, "<module>")]


def block(
    addr: int, size: int, state: str, frames: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "address": addr,
        "size": size,
        "requested_size": size,
        "state": state,
        "frames": frames or [],
    }


def segment(
    addr: int, blocks: list[dict[str, Any]], *, device: int = 0, kind: str = "large"
) -> dict[str, Any]:
    total = sum(b["size"] for b in blocks)
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {
        "device": device,
        "address": addr,
        "total_size": total,
        "allocated_size": allocated,
        "active_size": allocated,
        "requested_size": allocated,
        "stream": 0,
        "segment_type": kind,
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [],
        "blocks": blocks,
    }


def entry(
    action: str,
    addr: int,
    size: int,
    t: int,
    frames: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": 0,
        "time_us": t,
        "frames": frames or [],
        **extra,
    }


def settings(**over: Any) -> dict[str, Any]:
    base = {
        "PYTORCH_CUDA_ALLOC_CONF": "",
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": False,
    }
    return {**base, **over}


def write(
    path: Path,
    segments: list[dict[str, Any]],
    traces: list[list[dict[str, Any]]],
    alloc: Any = None,
) -> Path:
    data = {
        "segments": segments,
        "device_traces": traces,
        "allocator_settings": settings() if alloc is None else alloc,
        "external_annotations": [],
    }
    path.write_bytes(pickle.dumps(data, protocol=4))
    return path


def fragmented_oom(path: Path, alloc: Any = None) -> Path:
    """Two 1 GiB segments each cut into 64 MiB used / 64 MiB free; then a 256 MiB request OOMs."""
    base, segs, entries, t = 1 << 40, [], [], 0
    for s in range(2):
        blocks = []
        for i in range(8):
            addr = base + s * (1 << 30) + i * 128 * MIB
            blocks += [
                block(addr, 64 * MIB, "active_allocated", user_stack("/w/model.py", 41)),
                block(addr + 64 * MIB, 64 * MIB, "inactive"),
            ]
            t += 1
            entries.append(entry("alloc", addr, 64 * MIB, t, user_stack("/w/model.py", 41)))
        segs.append(segment(base + s * (1 << 30), blocks))
    entries.append(entry("oom", 2 * MIB, 256 * MIB, t + 1, device_free=2 * MIB))
    return write(path, segs, [entries], alloc)
