"""Count the work of one step: FLOPs and bytes moved, operator by operator.

A ``TorchDispatchMode`` sees every aten operator the step runs (forward, backward and the
optimizer), with the real tensors. For each call it records

- FLOPs from torch's own formulas (``torch.utils.flop_counter.flop_registry``: matmuls,
  convolutions, attention), and for the fused and composite operators it lacks (the encoder
  fast path, LSTM/GRU, attention on the CPU, ``linear``/``conv2d`` under inference mode) from
  ``capture/op_flops.py``; elementwise arithmetic is bandwidth-bound and counted as bytes. A
  compute operator whose shapes cannot be read is listed by name (``uncounted_compute_ops``);
- bytes: every input tensor read once, every output written once, in-place arguments written
  back (``Tensor(a!)`` in the schema); views and factories of empty tensors move nothing.
  This is the traffic of an unfused, eager step: what each operator must read and write at
  least, the memory side of its roofline.

It runs in one warm-up step before the profiled window (so it never slows a measured step),
and never for compiled code, whose kernels no dispatch mode sees. Errors in our counting are
notes; the operator itself always runs exactly as without us.
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from torchdoctor.capture import guest
from torchdoctor.capture.op_flops import composite_flops, wants_flops

MAX_CALLS = 300_000
"""Calls counted per step; a longer step is counted in part (``truncated``)."""

DTYPES = ("fp32", "fp64", "bf16", "fp16", "fp8", "int", "bool", "complex", "other")
_DTYPE_INDEX = {d: i for i, d in enumerate(DTYPES)}


def dtype_label(dtype: Any) -> str:
    """``fp32``, ``fp64``, ``bf16``... for a ``torch.dtype``."""
    name = str(dtype).replace("torch.", "")
    if name in ("float32", "float"):
        return "fp32"
    if name in ("float64", "double"):
        return "fp64"
    if name == "bfloat16":
        return "bf16"
    if name in ("float16", "half"):
        return "fp16"
    if name.startswith("float8"):
        return "fp8"
    if name.startswith(("int", "uint")):
        return "int"
    if name == "bool":
        return "bool"
    if name.startswith("complex"):
        return "complex"
    return "other"


@dataclass
class WorkCount:
    """Per-call columns of one counted step."""

    flops: array[float] = field(default_factory=lambda: array("d"))
    bytes: array[float] = field(default_factory=lambda: array("d"))
    dtype: array[int] = field(default_factory=lambda: array("b"))
    """Index into ``DTYPES`` (the first floating input's dtype, else the first tensor's)."""
    device: array[int] = field(default_factory=lambda: array("b"))
    """0: CPU, 1: CUDA (or another accelerator), 2: other (meta...)."""
    op: array[int] = field(default_factory=lambda: array("i"))
    """Index into ``op_names``."""
    conv: array[int] = field(default_factory=lambda: array("b"))
    """1 for a convolution (its FLOPs run at the convolution rate), else 0."""
    op_names: list[str] = field(default_factory=list)
    uncounted: dict[str, int] = field(default_factory=dict)
    """Calls by operator name of compute operators whose FLOPs could not be counted (a custom
    operator, shapes that could not be read): counted as zero FLOPs, their bytes as usual."""
    truncated: bool = False
    errors: int = 0
    seconds: float = 0.0
    """Wall time of the counted step (with the counting overhead)."""

    def __len__(self) -> int:
        return len(self.op)

    def summary(self) -> dict[str, Any]:
        """Totals by dtype and device, and the operators doing most work (plain data)."""
        by_dtype: dict[str, list[float]] = {}
        by_op: dict[str, list[float]] = {}
        devices = {0: "cpu", 1: "accelerator", 2: "other"}
        by_device: dict[str, list[float]] = {}
        for i in range(len(self)):
            f, b = self.flops[i], self.bytes[i]
            for table, key in (
                (by_dtype, DTYPES[self.dtype[i]]),
                (by_op, self.op_names[self.op[i]]),
                (by_device, devices.get(self.device[i], "other")),
            ):
                row = table.setdefault(key, [0.0, 0.0, 0.0])
                row[0] += f
                row[1] += b
                row[2] += 1
        top = sorted(by_op.items(), key=lambda kv: -(kv[1][0] * 1e-3 + kv[1][1]))[:12]
        return {
            "calls": len(self),
            "flops": float(sum(self.flops)),
            "bytes": float(sum(self.bytes)),
            "truncated": self.truncated,
            "uncounted_compute_ops": dict(sorted(self.uncounted.items())),
            # what the mode saw at its level: a profiled operator missing here ran inside one
            # it saw whole (a custom operator's aten::mm)
            "ops_seen": sorted({n.split(".", 1)[0] for n in self.op_names}),
            "counting_errors": self.errors,
            "counted_step_s": round(self.seconds, 4),
            "by_dtype": {
                k: {"flops": v[0], "bytes": v[1], "calls": int(v[2])} for k, v in by_dtype.items()
            },
            "by_device": {
                k: {"flops": v[0], "bytes": v[1], "calls": int(v[2])} for k, v in by_device.items()
            },
            "top_ops": [
                {"op": k, "flops": v[0], "bytes": v[1], "calls": int(v[2])} for k, v in top
            ],
        }


def _make_mode() -> Any:
    """The dispatch mode class (built lazily: importing it imports torch)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import flop_registry

    tensor_type = torch.Tensor
    empty_like = {
        "aten::empty",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::_local_scalar_dense",
        "aten::detach",
        "aten::lift_fresh",
    }

    def nbytes(t: Any) -> int:
        return int(t.numel()) * int(t.element_size())

    class CountingMode(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # torch wraps a mode's __torch_dispatch__ in dynamo.disable, which imports
            # torch._dynamo (seconds) at the first operator; we never count compiled code.
            return False

        def __init__(self, work: WorkCount) -> None:
            super().__init__()
            self.work = work
            self.active = True
            self._names: dict[Any, int] = {}
            self._write_args: dict[Any, tuple[int, ...]] = {}
            self._arg_names: dict[Any, list[str] | None] = {}

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)  # the user's operator: its errors are the user's
            if self.active:
                try:
                    self._count(func, args, kwargs, out)
                except Exception as exc:
                    self.work.errors += 1
                    if self.work.errors == 1:
                        guest.note("counting FLOPs and bytes", exc)
            return out

        def _count(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
            work = self.work
            if len(work.op) >= MAX_CALLS:
                work.truncated, self.active = True, False
                return
            name = func.name() if hasattr(func, "name") else str(func)
            idx = self._names.get(name)
            if idx is None:
                idx = self._names[name] = len(work.op_names)
                work.op_names.append(name)
            schema = func._schema
            returns = schema.returns
            views = bool(returns) and all(
                r.alias_info is not None and not r.alias_info.is_write for r in returns
            )
            inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, tensor_type)]
            if views or name in empty_like:
                flops, moved = 0.0, 0.0
            else:
                moved = float(sum(nbytes(t) for t in inputs))
                written = tree_leaves([args[i] for i in self._written(func, args)])
                moved += float(sum(nbytes(t) for t in written if isinstance(t, tensor_type)))
                outs = [t for t in tree_leaves(out) if isinstance(t, tensor_type)]
                in_ids = {id(t) for t in inputs}
                moved += float(sum(nbytes(t) for t in outs if id(t) not in in_ids))
                formula = flop_registry.get(func._overloadpacket)
                if formula is not None:
                    flops = float(formula(*args, **kwargs, out_val=out))
                else:
                    flops = self._composite(func, name, args, kwargs, out)
            first = next(
                (t for t in inputs if t.is_floating_point()), inputs[0] if inputs else None
            )
            if first is None:
                dtype, device = _DTYPE_INDEX["other"], 2
            else:
                dtype = _DTYPE_INDEX[dtype_label(first.dtype)]
                kind = first.device.type
                device = 0 if kind == "cpu" else 2 if kind == "meta" else 1
            work.flops.append(flops)
            work.bytes.append(moved)
            work.dtype.append(dtype)
            work.device.append(device)
            work.op.append(idx)
            work.conv.append(1 if "conv" in name else 0)

        def _composite(self, func: Any, name: str, args: Any, kwargs: Any, out: Any) -> float:
            """FLOPs of an operator torch's registry lacks (``capture/op_flops.py``); a compute
            operator whose FLOPs cannot be counted is noted by name and counts none."""
            if func in self._arg_names:
                names = self._arg_names[func]
            else:  # None: no formula and no compute (element-wise work, views: most calls)
                known = wants_flops(name)
                names = [a.name for a in func._schema.arguments] if known else None
                self._arg_names[func] = names
            if names is None:
                return 0.0
            try:
                flops = composite_flops(
                    name, {**dict(zip(names, args, strict=False)), **kwargs}, out
                )
            except Exception:
                flops = None
            if flops is not None:
                return flops
            uncounted = self.work.uncounted
            uncounted[name] = uncounted.get(name, 0) + 1
            return 0.0

        def _written(self, func: Any, args: Any) -> tuple[int, ...]:
            got = self._write_args.get(func)
            if got is None:
                got = tuple(
                    i
                    for i, a in enumerate(func._schema.arguments)
                    if a.alias_info is not None and a.alias_info.is_write and not a.kwarg_only
                )
                self._write_args[func] = got
            return tuple(i for i in got if i < len(args))

    return CountingMode


class StepCounter:
    """Counts one step's work: ``begin()`` at a step boundary, ``end()`` at the next one."""

    def __init__(self) -> None:
        self.work: WorkCount | None = None
        self._mode: Any = None
        self._t0 = 0.0

    @property
    def counting(self) -> bool:
        """Between ``begin`` and ``end``."""
        return self._mode is not None

    def begin(self) -> None:
        """Push the counting mode on the calling thread (never raises)."""
        if self._mode is not None:
            return
        try:
            self.work = WorkCount()
            mode = _make_mode()(self.work)
            mode.__enter__()
            self._mode = mode
            self._t0 = time.perf_counter()
        except Exception as exc:
            guest.note("starting the FLOP and byte count", exc)
            self._mode = None

    def end(self) -> WorkCount | None:
        """Pop the mode (only when it is the innermost one: a mode the script pushed since
        stays, and ours turns into a pass-through); returns the count."""
        mode, self._mode = self._mode, None
        if mode is None:
            return self.work
        mode.active = False
        try:
            from torch.utils._python_dispatch import _get_current_dispatch_mode

            current: Any = _get_current_dispatch_mode()
            if current is mode:
                current.__exit__(None, None, None)
            else:
                guest.note("ending the FLOP and byte count", RuntimeError("mode not innermost"))
        except Exception as exc:
            guest.note("ending the FLOP and byte count", exc)
        if self.work is not None:
            self.work.seconds = time.perf_counter() - self._t0
        return self.work
