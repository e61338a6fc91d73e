"""CUDA-only collection: allocator statistics, NVML sampling, and the state at out-of-memory.

Every function takes the ``torch.cuda`` module (and ``pynvml``) as it finds them, so tests can
pass fakes; none of it runs on a machine without a CUDA device.
"""

from __future__ import annotations

import contextlib
import pickle
import re
import threading
from pathlib import Path
from typing import Any

from torchdoctor.code_paths import code_paths
from torchdoctor.hardware import is_mig
from torchdoctor.record import layout


def memory_record(cuda: Any, device: int | None = None) -> dict[str, Any]:
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


def device_record(cuda: Any, device: int | None = None) -> dict[str, Any]:
    """Name, compute capability and whether it has bf16 tensor cores (sm80 and later)."""
    major, minor = cuda.get_device_capability(device)
    return {
        "name": str(cuda.get_device_name(device)),
        "capability": f"{major}.{minor}",
        "bf16_tensor_cores": (major, minor) >= (8, 0),
        "tf32_capable": (major, minor) >= (8, 0),
        "count": int(cuda.device_count()),
    }


def script_device(cuda: Any, local_rank: int = 0) -> int:
    """The CUDA ordinal the script works on: the current device, or ``cuda:LOCAL_RANK`` when a
    torchrun rank put its tensors there without ``torch.cuda.set_device`` (its current device
    stays 0, so reading "the current device" would report rank 0's GPU on every rank).

    Decided by evidence: the device whose caching allocator reached the higher peak."""
    current = int(cuda.current_device())
    if local_rank == current or not 0 <= local_rank < int(cuda.device_count()):
        return current

    def peak(device: int) -> int:
        stats = cuda.memory_stats(device)
        return int(
            stats.get("allocated_bytes.all.peak", 0) or stats.get("reserved_bytes.all.peak", 0)
        )

    return local_rank if peak(local_rank) > peak(current) else current


class NvmlSampler:
    """Samples GPU utilisation and memory through NVML in a daemon thread."""

    def __init__(
        self,
        pynvml: Any,
        index: int = 0,
        interval_s: float = 0.1,
        pci_bus_id: str | None = None,
        uuids: tuple[str, ...] = (),
    ) -> None:
        self.pynvml = pynvml
        self.index = index
        """NVML's index of the device (not the CUDA ordinal; see ``nvml_target``)."""
        self.pci_bus_id = pci_bus_id
        """NVML numbers all GPUs while CUDA numbers the visible ones: the PCI bus id (when
        known) names the same device to both."""
        self.uuids = uuids
        """NVML UUIDs to try after the bus id ("GPU-..." or "MIG-...")."""
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
            handle = self._handle()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return
        self._thread = threading.Thread(
            target=self._run, args=(handle,), name="torchdoctor-nvml", daemon=True
        )
        self._thread.start()

    def _handle(self) -> Any:
        # Bus id, then UUID, then index: the first lookup that names a device wins.
        nvml = self.pynvml
        lookups: list[tuple[Any, Any]] = []
        if self.pci_bus_id:
            # nvidia-ml-py's name; it calls the C library's _v2 symbol itself.
            lookups.append((nvml.nvmlDeviceGetHandleByPciBusId, self.pci_bus_id))
        lookups += [(nvml.nvmlDeviceGetHandleByUUID, uuid) for uuid in self.uuids]
        lookups.append((nvml.nvmlDeviceGetHandleByIndex, self.index))
        first_error: Exception | None = None
        for lookup, key in lookups:
            try:
                return lookup(key)
            except Exception as exc:
                first_error = first_error or exc
        assert first_error is not None
        raise first_error

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
            self._thread = None
            with contextlib.suppress(Exception):  # nvmlInit counts references; give ours back
                self.pynvml.nvmlShutdown()
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


def nvml_uuids(cuda: Any, device: int) -> tuple[str, ...]:
    """NVML UUIDs that may name a CUDA device: torch prints the 16 bytes bare, NVML prefixes
    "GPU-" (a whole GPU) or "MIG-" (a MIG slice)."""
    uuid = str(getattr(cuda.get_device_properties(device), "uuid", "") or "")
    if not uuid:
        return ()
    if uuid.startswith(("GPU-", "MIG-")):
        return (uuid,)
    return (f"GPU-{uuid}", f"MIG-{uuid}")


def nvml_index(ordinal: int, visible: str | None) -> int:
    """NVML's index for CUDA ordinal ``ordinal``: NVML counts every GPU, CUDA only those in
    ``CUDA_VISIBLE_DEVICES`` (a list of indices; other forms leave the ordinal as it is)."""
    entries = [e.strip() for e in (visible or "").split(",") if e.strip()]
    if ordinal < len(entries) and entries[ordinal].isdigit():
        return int(entries[ordinal])
    return ordinal


def nvml_sampler(
    pynvml: Any, cuda: Any, device: int, interval_s: float, visible: str | None
) -> NvmlSampler:
    """A sampler for CUDA device ``device``, found by bus id, then UUID, then NVML index.

    A MIG slice shares its GPU's bus id: only its UUID ("MIG-...") names the slice itself."""
    mig = is_mig(str(cuda.get_device_name(device)))
    return NvmlSampler(
        pynvml,
        nvml_index(device, visible),
        interval_s,
        None if mig else pci_bus_id(cuda, device),
        nvml_uuids(cuda, device),
    )


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


def user_frame(frames: list[dict[str, Any]]) -> str:
    """ "file:line" of the innermost frame of the user's own code (``code_paths``: not torch,
    torchdoctor, an installed package such as Lightning, or the standard library), or "".

    A user's folder that is merely named ``torch`` is the user's. C++ frames (a snapshot recorded
    with ``stacks="all"``), CPython's own and ``??`` frames are skipped: only a ``.py`` file is a
    line a user can open."""
    is_user = code_paths().is_user
    for f in frames:
        filename = str(f.get("filename", ""))
        if filename.endswith(".py") and is_user(filename):
            return f"{filename}:{f.get('line', 0)}"
    return ""


def largest_blocks(snapshot: dict[str, Any], top: int = 5) -> list[dict[str, Any]]:
    """The largest live allocations in a memory snapshot, with their allocation frame
    (:func:`user_frame`) if the allocator history was recorded."""
    blocks: list[dict[str, Any]] = []
    for seg in snapshot.get("segments", []):
        for block in seg.get("blocks", []):
            if block.get("state") == "active_allocated":
                where = user_frame(block.get("frames") or [])
                blocks.append({"bytes": int(block.get("size", 0)), "where": where})
    blocks.sort(key=lambda b: -b["bytes"])
    return blocks[:top]


def snapshot_name(rank: int | None = None) -> str:
    """The snapshot file for this process: ranks of one job share the run folder."""
    return layout.snapshot_name(rank)


def write_snapshot(cuda: Any, path: Path) -> dict[str, Any]:
    """Dump ``cuda.memory._snapshot()`` to ``path`` (for pytorch.org/memory_viz); returns it."""
    snapshot: dict[str, Any] = cuda.memory._snapshot()
    with open(path, "wb") as fh:
        pickle.dump(snapshot, fh)
    return snapshot


def oom_device(message: str) -> int | None:
    """The CUDA ordinal an out-of-memory message names ("GPU 1 has a total capacity ...")."""
    m = re.search(r"GPU (\d+) has a total capacity", message)
    return int(m.group(1)) if m else None


def oom_record(
    cuda: Any,
    exc: BaseException,
    folder: Path,
    device: int | None = None,
    snapshot_file: str = layout.SNAPSHOT,
    observed: OomWatch | None = None,
) -> dict[str, Any]:
    """What filled the memory: the message's numbers, allocator stats, the largest live blocks;
    writes ``memory_summary.txt`` and the snapshot (for pytorch.org/memory_viz).

    ``device``: the CUDA ordinal; by default the one the message names, else the current one.
    A snapshot the OOM observer took at the failure is kept rather than replaced by a later one.
    """
    record: dict[str, Any] = {"message": str(exc).splitlines()[0][:500]}
    record.update(parse_oom_message(str(exc)))
    try:
        if device is None:
            device = oom_device(str(exc))
        if device is None:
            device = int(cuda.current_device())
        record["device"] = device
        record["memory"] = memory_record(cuda, device)
        (folder / "memory_summary.txt").write_text(cuda.memory_summary(device), encoding="utf-8")
        record["summary_file"] = "memory_summary.txt"
        if observed is not None and observed.snapshot_file is not None:
            record.update(observed.record())
        else:
            snapshot = write_snapshot(cuda, folder / snapshot_file)
            record["snapshot_file"] = snapshot_file
            record["largest_blocks"] = largest_blocks(snapshot)
    except Exception as exc2:  # partial evidence beats none
        record["collect_error"] = f"{type(exc2).__name__}: {exc2}"
    return record


class OomWatch:
    """The allocator's out-of-memory observer: takes the snapshot *at* the OOM, so an OOM the
    script catches itself (a batch-size search, a retry) still leaves its evidence.

    torch offers no way to detach an observer, so ``close`` makes it a no-op instead.
    """

    max_snapshots = 4
    """cuDNN and others catch OOMs and retry with less memory: keep the latest of the first
    few snapshots, without paying for one at every retry."""

    def __init__(self, cuda: Any, folder: Path, snapshot_file: str = layout.SNAPSHOT) -> None:
        self.cuda = cuda
        self.path = folder / snapshot_file
        self.events: list[dict[str, int]] = []
        self.count = 0
        self.snapshot_file: str | None = None
        self.largest: list[dict[str, Any]] = []
        self.error: str | None = None
        self.active = True

    def __call__(self, device: int, alloc: int, device_limit: int, device_free: int) -> None:
        """The allocator calls this (with the GIL) before it raises OutOfMemoryError, with the
        device, the request, the memory the process may use (the device's total, or its
        per-process fraction) and the driver's free memory (c10/cuda/CUDACachingAllocator.cpp)."""
        if not self.active:
            return
        self.count += 1
        if len(self.events) < 16:
            self.events.append(
                {
                    "device": int(device),
                    "tried_bytes": int(alloc),
                    "device_limit_bytes": int(device_limit),
                    "device_free_bytes": int(device_free),
                }
            )
        if self.count > self.max_snapshots:
            return
        try:
            self.largest = largest_blocks(write_snapshot(self.cuda, self.path))
            self.snapshot_file = self.path.name
        except Exception as exc:  # never turn an OOM into a different error
            self.error = f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        """Stop observing (the allocator keeps the callable)."""
        self.active = False

    def record(self) -> dict[str, Any]:
        """What the observer saw: OOM count, the first OOMs' sizes, the snapshot's file and its
        largest live blocks."""
        out: dict[str, Any] = {"observed_ooms": self.count, "observed": self.events}
        if self.snapshot_file is not None:
            out["snapshot_file"] = self.snapshot_file
            out["snapshot_at"] = "oom observer"
            out["largest_blocks"] = self.largest
        if self.error:
            out["observer_error"] = self.error
        return out


def attach_oom_watch(torch_c: Any, watch: OomWatch) -> bool:
    """Attach ``watch`` as the CUDA allocator's OOM observer; False where torch lacks the hook."""
    attach = getattr(torch_c, "_cuda_attach_out_of_memory_observer", None)
    if not callable(attach):
        return False
    attach(watch)
    return True
