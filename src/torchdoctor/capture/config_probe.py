"""Configuration the trace cannot show: autocast, GradScaler, TF32, cuDNN, DataParallel vs DDP,
and which optimizer implementation runs.

Everything here is caught at construction or context entry (once per object or per ``with``),
never per operator, so it costs nothing measurable per step.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from typing import Any

from torchdoctor.capture.guest import read_or_none as _read
from torchdoctor.capture.patches import Patcher
from torchdoctor.record.rows import (
    AutocastUse,
    ConstructionCall,
    DataParallelWrapper,
    DdpWrapper,
    GradScaler,
    Optimizer,
)

_MAX_OBJECTS = 16


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def optimizer_record(optimizer: Any, call: ConstructionCall | None = None) -> Optimizer:
    """Class, implementation (fused / foreach / for-loop), and parameter count and bytes;
    ``call``: where the script built it."""
    defaults = getattr(optimizer, "defaults", {}) or {}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    devices = sorted({p.device.type for p in params})
    dtypes = sorted({_dtype_name(p.dtype) for p in params})
    fused, foreach = defaults.get("fused"), defaults.get("foreach")
    if fused:
        impl = "fused"
    elif foreach:
        impl = "foreach"
    elif foreach is None and "foreach" in defaults:
        # torch picks foreach by itself when every parameter is on CUDA (None means "auto").
        impl = "foreach (auto)" if devices == ["cuda"] else "for-loop"
    else:
        impl = "for-loop" if "foreach" in defaults else "default"
    return Optimizer(
        class_name=type(optimizer).__name__,
        impl=impl,
        impl_options=tuple(impl_options(optimizer, devices, dtypes)),
        fused=fused,
        foreach=foreach,
        param_tensors=len(params),
        param_count=sum(p.numel() for p in params),
        param_bytes=sum(p.numel() * p.element_size() for p in params),
        param_devices=tuple(devices),
        param_dtypes=tuple(dtypes),
        call=call,
    )


def impl_options(optimizer: Any, devices: list[str], dtypes: list[str]) -> list[str]:
    """The implementations (``foreach``, ``fused``) this optimizer's class accepts and that run
    for its parameters in the torch version in use: ``fused`` only where the constructor takes
    it, every parameter's device has fused kernels and every dtype is floating point."""
    import inspect

    import torch

    try:
        params = inspect.signature(type(optimizer).__init__).parameters
    except (TypeError, ValueError):
        return []
    defaults = getattr(optimizer, "defaults", {}) or {}
    out = []
    if "foreach" in params:
        out.append("foreach")
    if "fused" in params and not defaults.get("differentiable"):
        try:
            from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

            fused_devices = set(_get_fused_kernels_supported_devices())
        except Exception:  # an older torch: CUDA only
            fused_devices = {"cuda"}
        floating = all(getattr(torch, d).is_floating_point for d in dtypes if hasattr(torch, d))
        if devices and set(devices) <= fused_devices and floating:
            out.append("fused")
    return out


def construction_call(cls_name: str) -> ConstructionCall | None:
    """The user's call that built an object of class ``cls_name`` (arguments as source text;
    only the site when its source cannot be read), or None when library code built it."""
    from torchdoctor.capture import callsource

    site = callsource.user_frame_site()
    if site is None:
        return None
    call = callsource.call_arguments(site[0], site[1], (cls_name,)) or {}
    return ConstructionCall(
        f"{site[0]}:{site[1]}",
        call.get("func", ""),
        tuple(call.get("args", ())),
        call.get("kwargs"),
    )


def _uses_tf32(new: Any, legacy: Any) -> bool:
    # The per-backend fp32_precision wins; "none" (inherit) or its absence defers to the legacy flag.
    if new == "tf32":
        return True
    if new in ("ieee", "bf16"):
        return False
    return bool(legacy)


def backend_flags() -> dict[str, Any]:
    """TF32, matmul precision and cuDNN flags as they are now; never raises.

    The new ``fp32_precision`` settings (``torch.backends.cuda.matmul``, ``torch.backends.cudnn
    .conv``) are read first; the legacy ``allow_tf32`` flags and the float32 matmul precision are
    the fallback (None where torch refuses to read them). ``tf32_matmul`` / ``tf32_conv`` are
    the verdicts: whether fp32 matmuls / convolutions run on TF32 tensor cores.
    """
    import torch

    backends = torch.backends
    # None where torch lacks a setting (fp32_precision arrived in 2.9) or refuses to read it:
    # after a script sets the new API, reading a legacy flag raises RuntimeError.
    matmul_new = _read(lambda: backends.cuda.matmul.fp32_precision)
    conv_new = _read(lambda: backends.cudnn.conv.fp32_precision)  # type: ignore[attr-defined]
    matmul_legacy = _read(lambda: bool(backends.cuda.matmul.allow_tf32))
    cudnn_legacy = _read(lambda: bool(backends.cudnn.allow_tf32))
    precision = _read(torch.get_float32_matmul_precision)
    flags: dict[str, Any] = {
        "cuda_matmul_fp32_precision": matmul_new,
        "cudnn_conv_fp32_precision": conv_new,
        # The CPU's oneDNN matmuls: the legacy precision sets it together with CUDA's.
        "mkldnn_matmul_fp32_precision": _read(lambda: backends.mkldnn.matmul.fp32_precision),  # type: ignore[attr-defined]
        "cuda_matmul_allow_tf32": matmul_legacy,
        "cudnn_allow_tf32": cudnn_legacy,
        "float32_matmul_precision": precision,
        "cudnn_benchmark": _read(lambda: bool(backends.cudnn.benchmark)),
        "cudnn_enabled": _read(lambda: bool(backends.cudnn.enabled)),
    }
    # Either legacy switch (the flag or a "high"/"medium" matmul precision) turns TF32 on.
    legacy_tf32 = bool(matmul_legacy) or precision in ("high", "medium")
    flags["tf32_matmul"] = _uses_tf32(matmul_new, legacy_tf32)
    flags["tf32_conv"] = _uses_tf32(conv_new, cudnn_legacy)
    return flags


_NEW_API = (
    ("cuda_matmul_fp32_precision", ("cuda", "matmul")),
    ("mkldnn_matmul_fp32_precision", ("mkldnn", "matmul")),
    ("cudnn_conv_fp32_precision", ("cudnn", "conv")),
)


def set_backend_flags(flags: dict[str, Any]) -> None:
    """Put back the settings :func:`backend_flags` read. The legacy switches first (the float32
    matmul precision, else ``allow_tf32``; cuDNN's ``allow_tf32``), since each also writes the
    per-backend ``fp32_precision`` values; then every per-backend value that differs from what
    was read, through the new API. Values that could not be read (None) are left as they are."""
    import torch

    backends = torch.backends
    if flags.get("float32_matmul_precision") is not None:
        torch.set_float32_matmul_precision(flags["float32_matmul_precision"])
    elif flags.get("cuda_matmul_allow_tf32") is not None:
        backends.cuda.matmul.allow_tf32 = bool(flags["cuda_matmul_allow_tf32"])
    if flags.get("cudnn_allow_tf32") is not None:
        backends.cudnn.allow_tf32 = bool(flags["cudnn_allow_tf32"])
    for key, (backend, op) in _NEW_API:
        value = flags.get(key)
        target = getattr(getattr(backends, backend, None), op, None)
        if value is None or target is None:
            continue
        if _read(functools.partial(getattr, target, "fp32_precision")) != value:
            target.fp32_precision = value
    if flags.get("cudnn_benchmark") is not None:
        backends.cudnn.benchmark = bool(flags["cudnn_benchmark"])


class ConfigProbe:
    """Records autocast, GradScaler, DataParallel / DDP and optimizer construction."""

    def __init__(self) -> None:
        self.autocast: Counter[tuple[str, str, bool]] = Counter()
        self.grad_scalers: list[GradScaler] = []
        self.data_parallel: list[DataParallelWrapper] = []
        self.ddp: list[DdpWrapper] = []
        self.optimizers: dict[int, Optimizer] = {}
        self.flags_at_window: dict[str, Any] | None = None
        self._patcher = Patcher()

    def install(self) -> None:
        """Wrap ``autocast.__enter__``, ``GradScaler.__init__``, ``DataParallel.__init__``,
        ``DistributedDataParallel.__init__`` and ``Optimizer.__init__``."""
        import torch
        from torch.amp.autocast_mode import autocast
        from torch.amp.grad_scaler import GradScaler

        probe = self
        orig_enter = autocast.__enter__

        def __enter__(ctx: Any) -> Any:
            key = (str(ctx.device), _dtype_name(ctx.fast_dtype), bool(ctx._enabled))
            probe.autocast[key] += 1
            return orig_enter(ctx)

        self._patcher.patch(autocast, "__enter__", __enter__)
        self._wrap_init(GradScaler, self._on_scaler)
        self._wrap_init(torch.nn.DataParallel, self._on_dp)
        self._wrap_init(torch.nn.parallel.DistributedDataParallel, self._on_ddp)
        self._wrap_init(torch.optim.Optimizer, self._on_optimizer)

    def _wrap_init(self, cls: type, record: Any) -> None:
        orig = cls.__init__  # type: ignore[misc]

        def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
            orig(obj, *args, **kwargs)
            # A half-built subclass: the record is optional, the object is not.
            with contextlib.suppress(Exception):
                record(obj)

        self._patcher.patch(cls, "__init__", __init__)

    def _on_scaler(self, scaler: Any) -> None:
        if len(self.grad_scalers) < _MAX_OBJECTS:
            device = getattr(scaler, "_device", "cuda")
            self.grad_scalers.append(GradScaler(str(device), bool(scaler._enabled)))

    def _on_dp(self, module: Any) -> None:
        if len(self.data_parallel) < _MAX_OBJECTS:
            self.data_parallel.append(DataParallelWrapper(tuple(module.device_ids or ())))

    def _on_ddp(self, module: Any) -> None:
        if len(self.ddp) < _MAX_OBJECTS:
            self.ddp.append(
                DdpWrapper(
                    bucket_cap_mb=getattr(module, "bucket_bytes_cap", 0) / 2**20,
                    find_unused_parameters=bool(module.find_unused_parameters),
                    static_graph=bool(getattr(module, "static_graph", False)),
                    gradient_as_bucket_view=bool(module.gradient_as_bucket_view),
                )
            )

    def _on_optimizer(self, optimizer: Any) -> None:
        if len(self.optimizers) < _MAX_OBJECTS:
            call = construction_call(type(optimizer).__name__)
            self.optimizers[id(optimizer)] = optimizer_record(optimizer, call)

    def note_window(self) -> None:
        """Read the backend flags while the profiled steps run (the script may set them late)."""
        self.flags_at_window = backend_flags()

    def uninstall(self) -> None:
        """Undo every patch (idempotent)."""
        self._patcher.restore()

    def snapshot(self) -> dict[str, Any]:
        """Everything recorded, for ``run.json``'s ``config`` section (rows typed)."""
        return {
            "autocast": tuple(
                AutocastUse(d, t, e, n) for (d, t, e), n in self.autocast.most_common()
            ),
            "grad_scalers": tuple(self.grad_scalers),
            "data_parallel": list(self.data_parallel),
            "ddp": list(self.ddp),
            "optimizers": tuple(self.optimizers.values()),
            "backend_flags": self.flags_at_window or backend_flags(),
        }
