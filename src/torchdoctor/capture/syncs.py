"""Host synchronisations and no-op asynchronous copies, with the user's call sites.

``Tensor.item`` / ``tolist`` / ``cpu`` / ``to`` / ``cuda`` are wrapped. The wrappers step aside
while torch.compile traces (so they add no graph breaks), ignore calls made by torch itself, and
only record while ``measuring`` is on (the steps after the warm-up). On CUDA the profiled window
also turns on ``torch.cuda.set_sync_debug_mode("warn")`` and collects the warnings' locations.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from time import perf_counter
from typing import Any

from torchdoctor.capture import guest
from torchdoctor.capture.patches import Patcher
from torchdoctor.code_paths import USER, code_paths
from torchdoctor.record.rows import HostSync, SyncDebugSite, UnpinnedCopy
from torchdoctor.record.run import SyncStats

_SYNC_WARNING = "called a synchronizing CUDA operation"
_TORCH_OR_OURS = frozenset({"torch", "torchdoctor"})


def first_user_site(frame: Any) -> str | None:
    """ "file:line" of the first frame of the user's own code (``code_paths``), walking out from
    ``frame``; named ``(inside lightning)`` when a package's code made the call; None if none.

    CUDA's sync-debug warning is raised from C++ with stack level 1, which blames the innermost
    Python frame: our ``item``/``cpu``/``to`` wrapper, torch's own code (GradScaler's
    ``.item()``) or a framework's (Lightning's loop). The line to fix is where the user's code
    called into them."""
    paths = code_paths()
    inside = ""
    while frame is not None:
        filename = frame.f_code.co_filename
        label = paths.label(filename)
        if label == USER:
            return f"{filename}:{frame.f_lineno}" + (f" (inside {inside})" if inside else "")
        if not inside and label.startswith("pkg:"):
            inside = label[4:]
        frame = frame.f_back
    return None


def target_device_type(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Device type a ``Tensor.to`` call moves to (``None`` when it only changes dtype)."""
    import torch

    dev = kwargs.get("device", args[0] if args else None)
    if isinstance(dev, torch.Tensor):
        return dev.device.type
    if isinstance(dev, torch.device):
        return dev.type
    if isinstance(dev, str):
        return dev.split(":")[0]
    if isinstance(dev, int) and not isinstance(dev, bool):
        return "cuda"  # an ordinal means an accelerator index
    return None


class SyncRecorder:
    """Counts host syncs (``item``/``tolist``/``cpu``/``to(cpu)`` of device tensors) and
    ``non_blocking`` copies from unpinned memory, keyed by the user's ``file:line``."""

    def __init__(self) -> None:
        self.measuring = False
        self.calls: dict[tuple[str, str, str], list[float]] = {}
        """(kind, device type, "file:line") -> [calls, seconds inside the call]."""
        self.unpinned: dict[str, list[float]] = {}
        """"file:line" -> [non_blocking copies from pageable memory, bytes copied]."""
        self.sync_debug: dict[str, int] = {}
        """"file:line" -> synchronising operations reported by the CUDA sync debug mode."""
        self.sync_debug_steps = 0
        """Steps sync-debug mode watched (its own window after the profiled one)."""
        self._patcher = Patcher()
        self._label = code_paths().label
        self._saved_filters: list[Any] | None = None
        self._saved_showwarning: Callable[..., Any] | None = None
        self._saved_sync_mode: int = 0

    # -- recording ------------------------------------------------------------------------
    def _site(self, extra: int = 0) -> str | None:
        # Two frames up (_site, wrapper) is the caller. Calls from torch itself (Adam's step
        # counters, GradScaler, inductor) are not the user's to fix, and are skipped before any
        # timing so they stay cheap.
        frame = sys._getframe(2 + extra)
        label = self._label(frame.f_code.co_filename)
        if label == USER:
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        if label in _TORCH_OR_OURS:  # torch's or our own (the meter's) calls
            return None
        return self._via_library(frame, label)

    def _via_library(self, frame: Any, library: str) -> str | None:
        """A call made by another library (Lightning's loop, torchvision's FakeData): the
        user's line that led there, naming the library; None when the way out passes through
        torch itself (the DataLoader fetching a batch: input time, not a step sync)."""
        while frame is not None:
            name = frame.f_code.co_filename
            label = self._label(name)
            if label in _TORCH_OR_OURS:
                return None
            if label == USER and not name.startswith("<"):
                return f"{name}:{frame.f_lineno} (inside {library.split(':', 1)[-1]})"
            frame = frame.f_back
        return None

    def _record(self, kind: str, device: str, site: str, seconds: float) -> None:
        entry = self.calls.setdefault((kind, device, site), [0, 0.0])
        entry[0] += 1
        entry[1] += seconds

    def _safe_record(self, kind: str, t: Any, site: str, seconds: float) -> None:
        try:
            self._record(kind, t.device.type, site, seconds)
        except Exception as exc:  # our bookkeeping never breaks the user's call
            guest.note(f"Tensor.{kind} watch", exc)

    def _to_site(self, t: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        """The user's site of a ``Tensor.to`` that reads a device tensor back (a sync); records
        a ``non_blocking`` copy from unpinned memory on the way; None when there is nothing to
        time. Called from the wrapper, so the caller is three frames up."""
        non_blocking = bool(kwargs.get("non_blocking")) or any(a is True for a in args)
        if t.is_cpu:  # the common case: only a non_blocking copy to a device matters
            if (
                non_blocking
                and target_device_type(args, kwargs) not in (None, "cpu")
                and not t.is_pinned()
            ):
                self._record_unpinned(self._site(1), t.numel() * t.element_size())
            return None
        site = None if non_blocking else self._site(1)
        if site is None or target_device_type(args, kwargs) != "cpu":
            return None
        return site

    def _record_unpinned(self, site: str | None, nbytes: int) -> None:
        if site is not None:
            entry = self.unpinned.setdefault(site, [0, 0])
            entry[0] += 1
            entry[1] += nbytes

    # -- installation ---------------------------------------------------------------------
    def install(self) -> None:
        """Wrap the tensor methods that synchronise or copy."""
        import torch

        base = torch._C.TensorBase
        for name in ("item", "tolist"):
            self._patcher.patch(torch.Tensor, name, self._wrap_timed(name, getattr(base, name)))
        self._patcher.patch(
            torch.Tensor, "cpu", self._wrap_timed("cpu", base.cpu, device_only=True)
        )
        self._patcher.patch(torch.Tensor, "to", self._wrap_to(base.to))
        self._patcher.patch(torch.Tensor, "cuda", self._wrap_cuda(base.cuda))

    def _wrap_timed(
        self, name: str, orig: Callable[..., Any], *, device_only: bool = False
    ) -> Callable[..., Any]:
        """``Tensor.<name>`` timed at the user's site. Scalars (``device_only`` off) are
        recorded from any device: on an accelerator each one waits for all queued work, and
        the same script runs on one; ``cpu()`` of a CPU tensor copies nothing."""
        import torch

        is_compiling = torch.compiler.is_compiling
        rec = self

        def wrapper(t: Any, *args: Any, **kwargs: Any) -> Any:
            if is_compiling() or not rec.measuring or (device_only and t.is_cpu):
                return orig(t, *args, **kwargs)
            site = rec._site()
            if site is None:
                return orig(t, *args, **kwargs)
            t0 = perf_counter()
            out = orig(t, *args, **kwargs)
            rec._safe_record(name, t, site, perf_counter() - t0)
            return out

        wrapper.__name__ = name
        return wrapper

    def _wrap_to(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        import torch

        is_compiling = torch.compiler.is_compiling
        rec = self

        def to(t: Any, *args: Any, **kwargs: Any) -> Any:
            if is_compiling() or not rec.measuring:
                return orig(t, *args, **kwargs)
            try:
                site = rec._to_site(t, args, kwargs)
            except Exception as exc:  # an odd tensor subclass: the copy still happens
                guest.note("Tensor.to watch", exc)
                site = None
            if site is None:
                return orig(t, *args, **kwargs)
            t0 = perf_counter()
            out = orig(t, *args, **kwargs)
            rec._safe_record("to(cpu)", t, site, perf_counter() - t0)
            return out

        return to

    def _wrap_cuda(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        import torch

        is_compiling = torch.compiler.is_compiling
        rec = self

        def cuda(t: Any, *args: Any, **kwargs: Any) -> Any:
            if is_compiling() or not rec.measuring:
                return orig(t, *args, **kwargs)
            try:
                non_blocking = bool(kwargs.get("non_blocking")) or any(a is True for a in args)
                if non_blocking and t.is_cpu and not t.is_pinned():
                    rec._record_unpinned(rec._site(), t.numel() * t.element_size())
            except Exception as exc:
                guest.note("Tensor.cuda watch", exc)
            return orig(t, *args, **kwargs)

        return cuda

    # -- CUDA sync debug mode (a window of its own, after the profiled one) ---------------------------------------
    def start_sync_debug(self) -> None:
        """Turn on ``set_sync_debug_mode("warn")`` and collect where it fires."""
        import torch

        self._saved_filters = list(warnings.filters)
        self._saved_showwarning = warnings.showwarning
        # "always": the default filter shows a warning once per location; we count every one.
        warnings.filterwarnings("always", message=f".*{_SYNC_WARNING}")
        previous = warnings.showwarning

        def showwarning(message: Any, category: Any, filename: str, lineno: int, *a: Any) -> None:
            if _SYNC_WARNING in str(message):
                site = first_user_site(sys._getframe(1)) or f"{filename}:{lineno}"
                self.sync_debug[site] = self.sync_debug.get(site, 0) + 1
            else:
                previous(message, category, filename, lineno, *a)

        warnings.showwarning = showwarning  # type: ignore[assignment]
        self._saved_sync_mode = torch.cuda.get_sync_debug_mode()
        if self._saved_sync_mode == 0:  # "warn" already warns; "error" is the user's choice
            torch.cuda.set_sync_debug_mode("warn")

    def stop_sync_debug(self) -> None:
        """Restore the sync debug mode and the warning filters."""
        if self._saved_filters is None:
            return
        import torch

        torch.cuda.set_sync_debug_mode(self._saved_sync_mode)  # the user's mode, not ours
        warnings.filters[:] = self._saved_filters  # type: ignore[index]
        if self._saved_showwarning is not None:
            warnings.showwarning = self._saved_showwarning
        self._saved_filters = None

    def uninstall(self) -> None:
        """Undo the patches and the sync debug mode (idempotent)."""
        self.stop_sync_debug()
        self._patcher.restore()

    def snapshot(self) -> SyncStats:
        """Recorded call sites, most frequent first (the ``syncs`` section)."""
        calls = sorted(self.calls.items(), key=lambda kv: -kv[1][0])
        unpinned = sorted(self.unpinned.items(), key=lambda kv: -kv[1][0])
        return SyncStats(
            host_syncs=tuple(HostSync(k, d, s, int(n), sec) for (k, d, s), (n, sec) in calls),
            unpinned_non_blocking=tuple(UnpinnedCopy(s, int(n), int(b)) for s, (n, b) in unpinned),
            sync_debug=tuple(
                SyncDebugSite(s, n)
                for s, n in sorted(self.sync_debug.items(), key=lambda kv: -kv[1])
            ),
            sync_debug_steps=self.sync_debug_steps,
        )
