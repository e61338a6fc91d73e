"""The runtime configuration: one dataclass, one TOML file, validated on construction.

``torchdoctor tune`` writes the winning configuration in this format and ``Runtime.from_file``
reads it, so a tuned result is something a user can read, edit and commit. This module does not
import torch.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args

from torchdoctor.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Precision = Literal["auto", "fp32", "tf32", "bf16-mixed", "fp16-mixed"]
CompileMode = Literal["off", "default", "reduce-overhead", "max-autotune"]
OptimizerImpl = Literal["default", "foreach", "fused"]
Strategy = Literal["auto", "single", "ddp", "fsdp"]

PRECISIONS: tuple[str, ...] = get_args(Precision)
COMPILE_MODES: tuple[str, ...] = get_args(CompileMode)
OPTIMIZER_IMPLS: tuple[str, ...] = get_args(OptimizerImpl)
STRATEGIES: tuple[str, ...] = get_args(Strategy)


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        import difflib

        close = difflib.get_close_matches(str(value), choices, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UserError(f"{name} must be one of {', '.join(choices)}; got {value!r}{hint}")


def _check_positive(name: str, value: float | None, *, allow_zero: bool = False) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{name} must be a number; got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise UserError(f"{name} must be {'>= 0' if allow_zero else '> 0'}; got {value!r}")


@dataclass
class RuntimeConfig:
    """Every setting the runtime applies. ``None`` means "choose for this machine"."""

    precision: Precision = "auto"
    """Numeric precision: fp32, tf32 (fp32 storage, TF32 matmuls), bf16-mixed, fp16-mixed (with a
    GradScaler), or auto (bf16-mixed on CUDA sm80+, fp16-mixed on older CUDA GPUs, fp32 on CPU)."""
    allow_tf32: bool = True
    """Let fp32 matmuls and convolutions use TF32 tensor cores on Ampere and later."""
    compile: CompileMode = "off"
    """torch.compile mode, or off for eager."""
    dynamic: bool | None = None
    """Passed to torch.compile: None lets it turn dynamic after the first shape change."""
    max_recompiles: int | None = None
    """Raise instead of silently falling back to eager after this many recompiles (None: warn only)."""
    cudnn_benchmark: bool = True
    """Let cuDNN pick the fastest convolution algorithm per input shape (fixed shapes win)."""
    channels_last: bool = False
    """Use channels_last memory format for the model and 4-D image batches."""
    optimizer_impl: OptimizerImpl = "default"
    """Optimizer implementation: the torch default, the multi-tensor foreach one, or fused."""
    batch_size: int | None = None
    """Per-process batch size (None: the workload's own)."""
    grad_accumulation: int = 1
    """Micro-batches per optimizer step; inner ones skip DDP's all-reduce (no_sync)."""
    num_workers: int | None = None
    """DataLoader worker processes (None: CPUs per local rank, at most 8)."""
    pin_memory: bool | None = None
    """Page-locked host batches for asynchronous copies (None: on when the device is CUDA)."""
    persistent_workers: bool | None = None
    """Keep workers alive across epochs (None: on when there are workers)."""
    prefetch_factor: int | None = None
    """Batches each worker loads ahead (None: torch's default of 2)."""
    device_prefetch: int = 2
    """Batches copied to the device ahead of use on a side stream (0: copy synchronously)."""
    strategy: Strategy = "auto"
    """How to train over several processes (under torchrun): ddp (a replica each), fsdp
    (FSDP2: parameters sharded, one unit per block), auto (ddp under torchrun, else single)."""
    ddp_bucket_cap_mb: float = 25.0
    """DDP gradient bucket size in MiB: smaller buckets start all-reducing earlier in backward."""
    seed: int | None = None
    """Seed for torch, numpy and random; None leaves them alone."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form settings a workload reads itself (kept, not interpreted)."""

    def __post_init__(self) -> None:
        _check_choice("precision", self.precision, PRECISIONS)
        _check_choice("compile", self.compile, COMPILE_MODES)
        _check_choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        _check_choice("strategy", self.strategy, STRATEGIES)
        _check_positive("batch_size", self.batch_size)
        _check_positive("grad_accumulation", self.grad_accumulation)
        _check_positive("num_workers", self.num_workers, allow_zero=True)
        _check_positive("prefetch_factor", self.prefetch_factor)
        _check_positive("device_prefetch", self.device_prefetch, allow_zero=True)
        _check_positive("ddp_bucket_cap_mb", self.ddp_bucket_cap_mb)
        _check_positive("max_recompiles", self.max_recompiles, allow_zero=True)
        if self.prefetch_factor is not None and self.num_workers == 0:
            raise UserError(
                "prefetch_factor needs num_workers > 0 (DataLoader rejects it otherwise)"
            )
        if not isinstance(self.extra, dict):
            raise UserError(f"extra must be a table of settings; got {self.extra!r}")

    # -- dict and file forms -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The effective configuration as plain data (for reports, run records and TOML)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "configuration") -> RuntimeConfig:
        """Build from a mapping; an unknown key is an error that names it."""
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                import difflib

                close = difflib.get_close_matches(key, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise UserError(f"{source}: unknown setting {key!r}{hint}")
        try:
            return cls(**data)
        except TypeError as exc:  # pragma: no cover - from_dict checks keys first
            raise UserError(f"{source}: {exc}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> RuntimeConfig:
        """Read a TOML file (settings at the top level or under ``[torchdoctor]``)."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UserError(f"{p}: no such configuration file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{p}: cannot read: {exc}") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"{p}: malformed TOML: {exc}") from None
        if "torchdoctor" in data and isinstance(data["torchdoctor"], dict):
            data = data["torchdoctor"]
        return cls.from_dict(data, source=str(p))

    def save(self, path: str | Path, *, comment: str | None = None) -> Path:
        """Write the configuration as TOML (``None`` values are left out: they mean "auto")."""
        import tomli_w

        p = Path(path)
        body = {k: v for k, v in self.to_dict().items() if v is not None and v != {}}
        head = "".join(f"# {line}\n" for line in (comment or "").splitlines())
        from torchdoctor.inputs import write_output

        return write_output(p, head + tomli_w.dumps(body), "configuration")
