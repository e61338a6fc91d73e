"""CUDA-only collection: allocator statistics, NVML sampling, and the state at out-of-memory.

Every function takes the ``torch.cuda`` module (and ``pynvml``) as it finds them, so tests can
pass fakes; none of it runs on a machine without a CUDA device.
"""

from __future__ import annotations

import pickle
import re
import threading
from pathlib import Path
from typing import Any

_GIB = 2**30


def memory_record(cuda: Any, device: int = 0) -> dict[str, Any]:
    """Allocated / reserved / peak bytes, allocator retries and the fragmentation ratio.

    ``fragmentation`` is ``1 - peak_allocated / peak_reserved``: the share of the memory the
    caching allocator holds that no tensor used at the peak.
    """
    stats = cuda.memory_stats(device)
    peak_alloc = int(stats.get("allocated_bytes.all.peak", 0))
    peak_reserved = int(stats.get("reserved_bytes.all.peak", 0))
    total = int(cuda.get_device_properties(device).total_memory)
    return {
        "allocated_bytes": int(stats.get("allocated_bytes.all.current", 0)),
        "reserved_bytes": int(stats.get("reserved_bytes.all.current", 0)),
        "peak_allocated_bytes": peak_alloc,
        "peak_reserved_bytes": peak_reserved,
        "inactive_split_bytes": int(stats.get("inactive_split_bytes.all.current", 0)),
        "alloc_retries": int(stats.get("num_alloc_retries", 0)),
        "ooms": int(stats.get("num_ooms", 0)),
        "total_bytes": total,
        "fragmentation": (1.0 - peak_alloc / peak_reserved) if peak_reserved else 0.0,
    }


def device_record(cuda: Any, device: int = 0) -> dict[str, Any]:
    """Name, compute capability and whether it has bf16 tensor cores (sm80 and later)."""
    major, minor = cuda.get_device_capability(device)
    return {
        "name": str(cuda.get_device_name(device)),
        "capability": f"{major}.{minor}",
        "bf16_tensor_cores": (major, minor) >= (8, 0),
        "tf32_capable": (major, minor) >= (8, 0),
        "count": int(cuda.device_count()),
    }


class NvmlSampler:
    """Samples GPU utilisation and memory through NVML in a daemon thread."""

    def __init__(
        self, pynvml: Any, index: int = 0, interval_s: float = 0.1, pci_bus_id: str | None = None
    ) -> None:
        self.pynvml = pynvml
        self.index = index
        self.pci_bus_id = pci_bus_id
        """NVML numbers all GPUs while CUDA numbers the visible ones: the PCI bus id (when
        known) names the same device to both."""
        self.interval_s = interval_s
        self.util_pct: list[int] = []
        self.mem_used_bytes: list[int] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Initialise NVML and start sampling; an NVML failure is recorded, not raised."""
        try:
            self.pynvml.nvmlInit()
            if self.pci_bus_id:
                handle = self.pynvml.nvmlDeviceGetHandleByPciBusId_v2(self.pci_bus_id)
            else:
                handle = self.pynvml.nvmlDeviceGetHandleByIndex(self.index)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return
        self._thread = threading.Thread(
            target=self._run, args=(handle,), name="torchdoctor-nvml", daemon=True
        )
        self._thread.start()

    def _run(self, handle: Any) -> None:
        while not self._stop.is_set():
            try:
                self.util_pct.append(int(self.pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
                self.mem_used_bytes.append(int(self.pynvml.nvmlDeviceGetMemoryInfo(handle).used))
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                return
            self._stop.wait(self.interval_s)

    def stop(self) -> dict[str, Any]:
        """Stop the thread; mean and max utilisation (percent) and peak memory used (bytes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        util = self.util_pct
        return {
            "samples": len(util),
            "interval_s": self.interval_s,
            "gpu_util_mean_pct": (sum(util) / len(util)) if util else None,
            "gpu_util_max_pct": max(util) if util else None,
            "mem_used_peak_bytes": max(self.mem_used_bytes) if self.mem_used_bytes else None,
            "error": self.error,
        }


def pci_bus_id(cuda: Any, device: int) -> str | None:
    """NVML's bus id string ("00000000:3B:00.0") for a CUDA device, if torch reports it."""
    props = cuda.get_device_properties(device)
    try:
        return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    except (AttributeError, TypeError, ValueError):  # older torch: no PCI fields
        return None


def try_import_pynvml() -> Any:
    """The ``pynvml`` module from nvidia-ml-py, or ``None`` when it is not installed."""
    try:
        import pynvml
    except Exception:
        return None
    return pynvml


_OOM_NUMBERS = {
    "tried_bytes": r"Tried to allocate ([\d.]+ [KMGT]?i?B)",
    "total_bytes": r"total capacity of ([\d.]+ [KMGT]?i?B)",
    "free_bytes": r"of which ([\d.]+ [KMGT]?i?B) is free",
    "in_use_bytes": r"this process has ([\d.]+ [KMGT]?i?B) memory in use",
    "allocated_bytes": r"([\d.]+ [KMGT]?i?B) is allocated by PyTorch",
    "reserved_unallocated_bytes": r"([\d.]+ [KMGT]?i?B) is reserved by PyTorch but unallocated",
}
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def _to_bytes(text: str) -> int:
    number, unit = text.split()
    return int(float(number) * _UNITS.get(unit, 1))


def parse_oom_message(message: str) -> dict[str, int]:
    """Byte counts from the caching allocator's out-of-memory message (those present)."""
    out: dict[str, int] = {}
    for key, pattern in _OOM_NUMBERS.items():
        m = re.search(pattern, message)
        if m:
            out[key] = _to_bytes(m.group(1))
    return out


def is_oom(exc: BaseException) -> bool:
    """True for CUDA (and other accelerator) out-of-memory errors."""
    name = type(exc).__name__
    return name == "OutOfMemoryError" or "out of memory" in str(exc).lower()[:200]


def largest_blocks(snapshot: dict[str, Any], top: int = 5) -> list[dict[str, Any]]:
    """The largest live allocations in a memory snapshot, with their allocation frame if the
    allocator history was recorded."""
    blocks: list[dict[str, Any]] = []
    for seg in snapshot.get("segments", []):
        for block in seg.get("blocks", []):
            if block.get("state") == "active_allocated":
                frames = block.get("frames") or []
                where = next(
                    (
                        f"{f['filename']}:{f['line']}"
                        for f in frames
                        if "torch" not in f["filename"]
                    ),
                    "",
                )
                blocks.append({"bytes": int(block.get("size", 0)), "where": where})
    blocks.sort(key=lambda b: -b["bytes"])
    return blocks[:top]


def oom_record(cuda: Any, exc: BaseException, folder: Path, device: int = 0) -> dict[str, Any]:
    """What filled the memory: the message's numbers, allocator stats, the largest live blocks;
    writes ``memory_summary.txt`` and ``memory_snapshot.pickle`` (for pytorch.org/memory_viz)."""
    record: dict[str, Any] = {"message": str(exc).splitlines()[0][:500]}
    record.update(parse_oom_message(str(exc)))
    try:
        record["memory"] = memory_record(cuda, device)
        (folder / "memory_summary.txt").write_text(cuda.memory_summary(device), encoding="utf-8")
        record["summary_file"] = "memory_summary.txt"
        snapshot = cuda.memory._snapshot()
        with open(folder / "memory_snapshot.pickle", "wb") as fh:
            pickle.dump(snapshot, fh)
        record["snapshot_file"] = "memory_snapshot.pickle"
        record["largest_blocks"] = largest_blocks(snapshot)
    except Exception as exc2:  # partial evidence beats none
        record["collect_error"] = f"{type(exc2).__name__}: {exc2}"
    return record
