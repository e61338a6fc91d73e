"""Global modes that cost speed: read while the measured steps run, with where the script set
them when it did.

- autograd anomaly detection (``torch.autograd.set_detect_anomaly`` / ``detect_anomaly()``):
  every forward operator stores a Python traceback, every backward one checks for NaN;
- deterministic algorithms (``torch.use_deterministic_algorithms``): slower kernels, and every
  ``torch.empty`` filled with NaN;
- intra-op threads (``torch.set_num_threads``, ``OMP_NUM_THREADS``): fewer than the cores this
  process may use leaves them idle during every operator;
- the oneDNN (mkldnn) and cuDNN backends switched off: convolutions fall back to slow kernels.

Anomaly detection and determinism are global (not per thread), so the stack sampler also reads
them at every sample: ``lines.modes_on_share`` says for what share of the window they were on,
which catches a ``with detect_anomaly():`` that wraps only part of the step.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from torchdoctor.capture import guest
from torchdoctor.capture.guest import read_or_none as _read
from torchdoctor.capture.patches import Patcher
from torchdoctor.code_paths import CodePaths
from torchdoctor.record.account import Modes, SetterCall

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def cores_per_rank() -> int:
    """CPUs this process may use (its affinity mask), shared by the ranks of the node."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, cpus // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)))


def read_modes() -> dict[str, Any]:
    """The modes as they are now (never raises)."""
    import torch

    return {
        "anomaly_detection": _read(torch.is_anomaly_enabled),
        "anomaly_check_nan": _read(torch.is_anomaly_check_nan_enabled),
        "deterministic_algorithms": _read(torch.are_deterministic_algorithms_enabled),
        "deterministic_warn_only": _read(torch.is_deterministic_algorithms_warn_only_enabled),
        "intra_op_threads": _read(torch.get_num_threads),
        "interop_threads": _read(torch.get_num_interop_threads),
        "cores_per_rank": cores_per_rank(),
        "thread_env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
        "mkldnn_enabled": _read(lambda: bool(torch.backends.mkldnn.enabled)),
        "mkldnn_available": _read(torch.backends.mkldnn.is_available),
        "cudnn_enabled": _read(lambda: bool(torch.backends.cudnn.enabled)),
        "cudnn_deterministic": _read(lambda: bool(torch.backends.cudnn.deterministic)),
        "cudnn_benchmark": _read(lambda: bool(torch.backends.cudnn.benchmark)),
    }


def sampler_probes() -> dict[str, Callable[[], bool]]:
    """Global modes the stack sampler reads at every sample (cheap C calls)."""
    import torch

    return {
        "anomaly_detection": torch.is_anomaly_enabled,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
    }


class ModeWatch:
    """Records who set the modes (the user's line of each call) and reads them at the window."""

    def __init__(self, paths: CodePaths) -> None:
        self.paths = paths
        self.calls: list[dict[str, Any]] = []
        """``{"call", "value", "site"}`` per call of a mode setter (at most 32)."""
        self.at_window: dict[str, Any] | None = None
        self._patcher = Patcher()
        self.original_set_num_threads: Callable[[int], None] | None = None
        self.originals: dict[str, Any] = {}
        """The setters as torch defines them: our own toggles call these, so that switching a
        mode for the extra steps is never recorded as the user's call."""

    def install(self) -> None:
        """Wrap the setters of the modes (``torch.set_num_threads``, anomaly, determinism)."""
        import torch

        self.original_set_num_threads = torch.set_num_threads
        for owner, name in (
            (torch, "set_num_threads"),
            (torch, "use_deterministic_algorithms"),
            (torch.autograd, "set_detect_anomaly"),
            (torch.autograd.anomaly_mode, "set_detect_anomaly"),
            (torch.autograd, "detect_anomaly"),
            (torch.autograd.anomaly_mode, "detect_anomaly"),
            (torch, "set_default_dtype"),
            (torch.nn.Module, "double"),
        ):
            self._wrap(owner, name)
        for backend in ("mkldnn", "cudnn"):
            self._wrap_backend(torch, backend)

    def _wrap_backend(self, torch: Any, backend: str) -> None:
        """Record who switched a kernel backend: ``torch.backends.<b>.enabled = ...`` (a
        property of the backend's module) and ``with torch.backends.<b>.flags(enabled=...):``
        (whose ``enabled`` defaults to False), as the calls ``<b>.enabled`` and ``<b>.flags``."""
        try:
            module = getattr(torch.backends, backend)
            flags, prop = getattr(module, "flags", None), type(module).__dict__.get("enabled")
            if callable(flags):
                self._patcher.patch(module, "flags", _recording_flags(self, backend, flags))
            if prop is not None and hasattr(prop, "__set__"):
                self._patcher.patch(type(module), "enabled", _RecordingProp(self, backend, prop))
        except Exception as exc:
            guest.note("recording the backend switches", exc)

    def _wrap(self, owner: Any, name: str) -> None:
        orig = getattr(owner, name, None)
        if orig is None:
            return
        self.originals.setdefault(name, orig)
        watch = self
        if isinstance(orig, type):  # a context-manager class: subclass it, keep isinstance
            wrapped: Any = type(
                orig.__name__, (orig,), {"__init__": _recording_init(watch, name, orig)}
            )
            wrapped.__module__ = orig.__module__
            wrapped.__qualname__ = orig.__qualname__
        else:

            def wrapped(*args: Any, **kwargs: Any) -> Any:
                watch._record(name, () if name == "double" else args, kwargs)
                return orig(*args, **kwargs)

            wrapped.__name__ = getattr(orig, "__name__", name)
            wrapped.__doc__ = getattr(orig, "__doc__", None)
        self._patcher.patch(owner, name, wrapped)

    def _record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            if len(self.calls) >= 32:
                return
            from torchdoctor.capture.callsites import user_site

            value = args[0] if args else next(iter(kwargs.values()), None)
            self.calls.append(
                {"call": name, "value": _plain(value), "site": user_site(self.paths, skip=2)}
            )
        except Exception as exc:
            guest.note("recording a mode setter", exc)

    def note_window(self) -> None:
        """Read the modes while the measured steps run."""
        try:
            self.at_window = read_modes()
        except Exception as exc:
            guest.note("reading the global modes", exc)

    def uninstall(self) -> None:
        """Restore the setters (idempotent)."""
        self._patcher.restore()

    def snapshot(self) -> Modes:
        """The modes at the window (or now) and the setter calls: the record's ``modes``."""
        now = self.at_window or _read(read_modes) or {}
        calls = tuple(SetterCall(c["call"], c["value"], c["site"] or "") for c in self.calls)
        return Modes(
            anomaly_detection=bool(now.get("anomaly_detection")),
            anomaly_check_nan=now.get("anomaly_check_nan"),
            deterministic_algorithms=bool(now.get("deterministic_algorithms")),
            deterministic_warn_only=now.get("deterministic_warn_only"),
            intra_op_threads=now.get("intra_op_threads"),
            interop_threads=now.get("interop_threads"),
            cores_per_rank=now.get("cores_per_rank"),
            thread_env=dict(now.get("thread_env") or {}),
            mkldnn_enabled=now.get("mkldnn_enabled"),
            mkldnn_available=now.get("mkldnn_available"),
            cudnn_enabled=now.get("cudnn_enabled"),
            cudnn_deterministic=now.get("cudnn_deterministic"),
            cudnn_benchmark=now.get("cudnn_benchmark"),
            setter_calls=calls,
        )


def _recording_init(watch: ModeWatch, name: str, orig: type) -> Callable[..., None]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        watch._record(name, args or (True,), kwargs)
        orig.__init__(self, *args, **kwargs)  # type: ignore[misc]

    return __init__


def _user_caller(watch: ModeWatch, depth: int) -> bool:
    """Whether the frame ``depth`` above the caller is the user's own code: a switch made by
    torch itself, or by check's toggles for the extra steps, is never the user's call."""
    import sys

    return watch.paths.is_user(sys._getframe(depth + 1).f_code.co_filename)


def _recording_flags(watch: ModeWatch, backend: str, orig: Callable[..., Any]) -> Any:
    import functools
    import inspect

    signature = inspect.signature(orig)

    @functools.wraps(orig)
    def flags(*args: Any, **kwargs: Any) -> Any:
        try:
            if _user_caller(watch, 1):
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                watch._record(f"{backend}.flags", (bound.arguments.get("enabled"),), {})
        except Exception as exc:  # a wrong call is torch's to refuse, below
            guest.note("recording a backend switch", exc)
        return orig(*args, **kwargs)

    return flags


class _RecordingProp:
    """The backend module's ``enabled`` property, recording who sets it."""

    def __init__(self, watch: ModeWatch, backend: str, prop: Any) -> None:
        self.watch, self.backend, self.prop = watch, backend, prop

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self.prop.__get__(obj, objtype)

    def __set__(self, obj: Any, value: Any) -> None:
        try:
            if _user_caller(self.watch, 1):
                self.watch._record(f"{self.backend}.enabled", (value,), {})
        except Exception as exc:
            guest.note("recording a backend switch", exc)
        self.prop.__set__(obj, value)


def _plain(value: Any) -> Any:
    return value if isinstance(value, bool | int | float | str | type(None)) else repr(value)[:40]
