"""NVIDIA's GPM counters (Hopper and later) over a window of steps, read through NVML.

GPM ("GPU performance monitoring") compares two device samples and answers, for the time between
them, how busy the tensor cores, the FP32 and FP16 pipes and the SMs were and how much of the DRAM
bandwidth was used: a cheap ground truth for "on tensor cores" and for memory-boundness, without a
profiler. Older GPUs, MIG slices and VMs that do not pass the counters through refuse; the refusal
is recorded, never raised: this runs inside a user's training job.

Everything takes the ``pynvml`` module (nvidia-ml-py) as it finds it, so tests can pass a fake.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from torchdoctor.capture.gpu_probe import nvml_sampler

METRICS: tuple[tuple[str, str, str], ...] = (
    ("tensor_util_pct", "NVML_GPM_METRIC_ANY_TENSOR_UTIL", "tensor cores busy"),
    ("dram_bw_util_pct", "NVML_GPM_METRIC_DRAM_BW_UTIL", "DRAM bandwidth"),
    ("fp32_util_pct", "NVML_GPM_METRIC_FP32_UTIL", "FP32 pipes"),
    ("fp16_util_pct", "NVML_GPM_METRIC_FP16_UTIL", "FP16 pipes"),
    ("sm_util_pct", "NVML_GPM_METRIC_SM_UTIL", "SM busy"),
    ("sm_occupancy_pct", "NVML_GPM_METRIC_SM_OCCUPANCY", "SM occupancy"),
)
"""(record key, pynvml constant, words in the report line); every value is a percentage of the
window (for DRAM: of the peak bandwidth; for occupancy: of the resident warps an SM holds)."""

_REFUSALS = ("NVMLError_NotSupported", "NVMLError_NoPermission")
"""Errors that mean "this GPU or this VM does not offer GPM", not "something broke"."""


def _describe(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # an NVMLError's str() may itself ask the library
        return type(exc).__name__


def _refused(pynvml: Any, exc: BaseException) -> bool:
    for name in _REFUSALS:
        cls = getattr(pynvml, name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return True
    return False


def _return_text(pynvml: Any, code: int) -> str:
    """NVML's words for return code ``code`` ("Not Supported"), or the bare number."""
    try:
        return f"{pynvml.NVMLError(code)} (NVML return {code})"
    except Exception:
        return f"NVML return {code}"


class GpmWindow:
    """Two GPM samples, at ``start`` and at ``stop``, and the metrics NVML computes between them.

    No method raises: a failure ends the window with ``supported`` False (the device or VM refused)
    or with ``error`` set (something else failed), and ``stop`` still returns its record."""

    def __init__(
        self,
        pynvml: Any,
        handle: Any,
        *,
        release_nvml: bool = False,
        error: str | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.pynvml = pynvml
        self.handle = handle
        self.release_nvml = release_nvml
        """Call ``nvmlShutdown`` once in ``stop``: whoever made this window took an ``nvmlInit``
        reference for it (NVML counts them)."""
        self.supported: bool | None = None if error is None else False
        self.error = error
        self.clock = clock
        self._samples: list[Any] = []
        self._t0: float | None = None
        self._stopped = False

    def start(self) -> None:
        """Ask whether the device offers GPM, then take the first sample."""
        if self.error is not None or self._t0 is not None:
            return
        try:
            support = self.pynvml.nvmlGpmQueryDeviceSupport(self.handle)
            self.supported = bool(support.isSupportedDevice)
            if not self.supported:
                self.error = "this GPU has no GPM counters (Hopper or later has them)"
                return
            for _ in range(2):  # one at a time, so a failed second alloc still frees the first
                self._samples.append(self.pynvml.nvmlGpmSampleAlloc())
            self.pynvml.nvmlGpmSampleGet(self.handle, self._samples[0])
            self._t0 = self.clock()
        except Exception as exc:
            self._fail(exc)

    def stop(self) -> dict[str, Any]:
        """Take the second sample and compute the metrics; frees the samples.

        Returns ``{"supported", "metrics": {key: percent}, "seconds", "error", "metric_errors"}``:
        ``seconds`` is the host time between the two samples (None when there was no window); a
        metric NVML could not compute is left out of ``metrics`` and named in ``metric_errors``."""
        metrics: dict[str, float] = {}
        metric_errors: dict[str, str] = {}
        seconds: float | None = None
        if self._t0 is not None and self.error is None and not self._stopped:
            try:
                self.pynvml.nvmlGpmSampleGet(self.handle, self._samples[1])
                seconds = self.clock() - self._t0
                metrics, metric_errors = self._metrics()
            except Exception as exc:
                self._fail(exc)
        self._release()
        errors = [f"{key}: {text}" for key, text in metric_errors.items()]
        return {
            "supported": bool(self.supported),
            "metrics": metrics,
            "seconds": seconds,
            "error": self.error or ("; ".join(errors) if errors else None),
            "metric_errors": metric_errors,
        }

    def _metrics(self) -> tuple[dict[str, float], dict[str, str]]:
        nvml = self.pynvml
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(METRICS)
        request.sample1 = self._samples[0]
        request.sample2 = self._samples[1]
        for i, (_, constant, _) in enumerate(METRICS):
            request.metrics[i].metricId = getattr(nvml, constant)
        answer = nvml.nvmlGpmMetricsGet(request)
        metrics: dict[str, float] = {}
        errors: dict[str, str] = {}
        for i, (key, _, _) in enumerate(METRICS):
            metric = answer.metrics[i]
            code = int(metric.nvmlReturn)
            if code == nvml.NVML_SUCCESS:
                metrics[key] = float(metric.value)
            else:
                errors[key] = _return_text(nvml, code)
        return metrics, errors

    def _fail(self, exc: BaseException) -> None:
        if _refused(self.pynvml, exc):
            self.supported = False
        self.error = _describe(exc)

    def _release(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for sample in self._samples:
            with contextlib.suppress(Exception):
                self.pynvml.nvmlGpmSampleFree(sample)
        self._samples = []
        if self.release_nvml:
            with contextlib.suppress(Exception):
                self.pynvml.nvmlShutdown()


def unavailable(reason: str) -> dict[str, Any]:
    """The record of a window that could not be taken at all (no NVML, no CUDA device)."""
    return {
        "supported": False,
        "metrics": {},
        "seconds": None,
        "error": reason,
        "metric_errors": {},
    }


def gpm_window(
    pynvml: Any, torch_cuda: Any, device_index: int, visible_devices: str | None
) -> GpmWindow | None:
    """A window on CUDA device ``device_index``, found as the NVML sampler finds it (bus id, then
    UUID, then NVML's index under ``CUDA_VISIBLE_DEVICES``, ``visible_devices``).

    None when ``pynvml`` is None (nvidia-ml-py not installed). A device NVML cannot find gives a
    window whose record says so. The window holds an ``nvmlInit`` reference until ``stop``."""
    if pynvml is None:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return GpmWindow(pynvml, None, error=_describe(exc))
    try:
        # The sampler's lookup, so both instruments read the same GPU.
        handle = nvml_sampler(pynvml, torch_cuda, device_index, 0.0, visible_devices)._handle()
    except Exception as exc:
        return GpmWindow(pynvml, None, release_nvml=True, error=_describe(exc))
    return GpmWindow(pynvml, handle, release_nvml=True)


def gpm_lines(record: dict[str, Any] | None) -> list[str]:
    """The report line for a window's record: the counters NVML answered, or why there are none.
    No record (the window was never opened) gives no line."""
    if not record:
        return []
    metrics = record.get("metrics") or {}
    parts = [
        f"{words} {metrics[key]:.0f}%" for key, _, words in METRICS if metrics.get(key) is not None
    ]
    if not record.get("supported") or not parts:
        reason = record.get("error") or "no counter answered"
        return [f"GPU counters: not available here ({reason})"]
    line = "GPU counters over the clean steps (NVML GPM): " + ", ".join(parts)
    missing = [words for key, _, words in METRICS if metrics.get(key) is None]
    if missing:
        line += f" ({', '.join(missing)}: not read)"
    return [line]
