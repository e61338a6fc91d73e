"""The knobs the tuner varies, pruned to what applies on the device, and the full grid they span.

An *assignment* is a dict from knob name (a :class:`~torchdoctor.config.RuntimeConfig` field) to a
value. The baseline assignment is what an unmodified training script does: fp32 eager, the torch
default optimizer, data loaded in the main process. This module does not import torch: what the
device supports comes from a :class:`Probe` the baseline trial's child process reports.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from torchdoctor.config import RuntimeConfig
from torchdoctor.errors import UserError
from torchdoctor.rules.registry import knobs_by_finding

Assignment = dict[str, Any]

KnobName = Literal[
    "num_workers",
    "persistent_workers",
    "prefetch_factor",
    "pin_memory",
    "device_prefetch",
    "optimizer_impl",
    "compile",
    "precision",
    "channels_last",
    "ddp_bucket_cap_mb",
]
KNOB_NAMES: tuple[str, ...] = get_args(KnobName)

BASELINE: Assignment = {
    "precision": "fp32",
    "compile": "off",
    "optimizer_impl": "default",
    "num_workers": 0,
    "persistent_workers": False,
    "prefetch_factor": None,
    "pin_memory": False,
    "device_prefetch": 0,
    "channels_last": False,
    "ddp_bucket_cap_mb": 25.0,
    # Not searched: raised only after an out-of-memory trial, keeping the global batch.
    "grad_accumulation": 1,
}

# Cheapest and numerically safest first: data loading never changes the numbers, the optimizer
# implementation changes only rounding, compile costs seconds per trial, precision changes numerics.
DEFAULT_ORDER: tuple[str, ...] = (
    "num_workers",
    "pin_memory",
    "device_prefetch",
    "optimizer_impl",
    "compile",
    "precision",
    "channels_last",
    "ddp_bucket_cap_mb",
)

# Which knobs each analyser finding points at: the registry's entries (rules/registry.py).
FINDING_KNOBS: dict[str, tuple[str, ...]] = knobs_by_finding()


@dataclass(frozen=True)
class Probe:
    """What the device and the workload support, reported by the baseline trial's process."""

    device: str = "cpu"
    """``cpu`` or ``cuda``."""
    cuda_capability: tuple[int, int] | None = None
    """(major, minor) compute capability of the GPU, None on the CPU."""
    bf16: bool = True
    """bf16 autocast works on the device."""
    compiler: bool = True
    """torch.compile can build kernels here (a C++ compiler on the CPU, Triton on CUDA)."""
    cpu_count: int = 1
    """CPUs this process may use (its affinity mask), per local rank."""
    image_batches: bool = False
    """The batches hold 4-D tensors (channels_last applies)."""
    optimizer_impls: tuple[str, ...] = ("default",)
    """Optimizer implementations the workload's optimizer accepts on this device."""
    world_size: int = 1
    """Processes in the job (DDP bucket size applies above 1)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Probe:
        """Rebuild from the JSON a worker wrote (tuples come back as lists)."""
        d = dict(data)
        if d.get("cuda_capability") is not None:
            d["cuda_capability"] = tuple(d["cuda_capability"])
        d["optimizer_impls"] = tuple(d.get("optimizer_impls", ("default",)))
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Knob:
    """One setting the tuner varies; ``values[0]`` is the baseline value."""

    name: str
    values: tuple[Any, ...]
    parent: str | None = None
    """Applies only when this other knob is off its baseline value (worker settings need workers)."""


@dataclass(frozen=True)
class Space:
    """The knobs that apply, and why the others were left out."""

    knobs: tuple[Knob, ...]
    pruned: dict[str, str] = field(default_factory=dict)

    def knob(self, name: str) -> Knob | None:
        """The knob called ``name``, or None when it was pruned."""
        return next((k for k in self.knobs if k.name == name), None)

    def top_level(self) -> list[Knob]:
        """Knobs that apply on their own (not conditional on another)."""
        return [k for k in self.knobs if k.parent is None]

    def normalize(self, assignment: Assignment) -> Assignment:
        """Fill missing knobs from the baseline; reset knobs whose parent is at its baseline."""
        out = {**BASELINE, **assignment}
        for k in self.knobs:
            if k.parent is not None and out[k.parent] == BASELINE[k.parent]:
                out[k.name] = BASELINE[k.name]
        return out

    def grid(self) -> list[Assignment]:
        """Every distinct valid assignment (the exhaustive search space), baseline first."""
        seen: dict[str, Assignment] = {}
        for combo in itertools.product(*(k.values for k in self.knobs)):
            a = self.normalize({k.name: v for k, v in zip(self.knobs, combo, strict=True)})
            seen.setdefault(assignment_key(a), a)
        return list(seen.values())


def assignment_key(assignment: Assignment, repeat: int = 0) -> str:
    """A canonical, stable string for an assignment (and its measurement repeat)."""
    body = json.dumps(assignment, sort_keys=True, separators=(",", ":"))
    return body if repeat == 0 else f"{body}#{repeat}"


def _worker_counts(cpu_count: int) -> tuple[int, ...]:
    # More workers than about twice the CPUs only thrash; sleeping (I/O-bound) loaders still
    # gain up to there.
    return (0, *(w for w in (2, 4, 8) if w <= max(2, 2 * cpu_count)))


def _precisions(p: Probe) -> tuple[str, ...]:
    if p.device == "cuda":
        cap = p.cuda_capability or (0, 0)
        ampere = cap >= (8, 0)
        return (
            "fp32",
            *(("tf32",) if ampere else ()),
            *(("bf16-mixed",) if p.bf16 else ()),
            "fp16-mixed",
        )
    # fp16 autocast on the CPU has no fast kernels; bf16 may or may not pay (it is measured).
    return ("fp32", *(("bf16-mixed",) if p.bf16 else ()))


def _catalogue(p: Probe) -> tuple[list[Knob], dict[str, str]]:
    cuda = p.device == "cuda"
    knobs = [
        Knob("num_workers", _worker_counts(p.cpu_count)),
        Knob("persistent_workers", (False, True), parent="num_workers"),
        Knob("prefetch_factor", (None, 4), parent="num_workers"),
        Knob("pin_memory", (False, True)),
        Knob("device_prefetch", (0, 2)),
        Knob("optimizer_impl", p.optimizer_impls),
        Knob(
            "compile",
            ("off", "default", "reduce-overhead", "max-autotune") if cuda else ("off", "default"),
        ),
        Knob("precision", _precisions(p)),
        Knob("channels_last", (False, True)),
        Knob("ddp_bucket_cap_mb", (25.0, 5.0, 100.0)),
    ]
    pruned: dict[str, str] = {}
    if not cuda:
        pruned["pin_memory"] = "no accelerator: pinned memory only speeds up copies to a GPU"
        pruned["device_prefetch"] = "no accelerator: batches are already on the device"
    if not p.compiler:
        pruned["compile"] = "torch.compile cannot build kernels here (no C++ compiler / Triton)"
    if not p.image_batches:
        pruned["channels_last"] = "no 4-D image batches"
    if p.world_size <= 1:
        pruned["ddp_bucket_cap_mb"] = "single process: no DDP gradient buckets"
    if len(p.optimizer_impls) <= 1:
        pruned["optimizer_impl"] = (
            "the optimizer has no foreach/fused implementation on this device"
        )
    return knobs, pruned


def build_space(probe: Probe, only: Sequence[str] | None = None) -> Space:
    """The knobs that apply for ``probe``, optionally restricted to the names in ``only``."""
    if only is not None:
        unknown = [n for n in only if n not in KNOB_NAMES]
        if unknown:
            raise UserError(f"unknown knob {unknown[0]!r} (choose from {', '.join(KNOB_NAMES)})")
    knobs, pruned = _catalogue(probe)
    kept: list[Knob] = []
    for k in knobs:
        if only is not None and k.name not in only:
            pruned.setdefault(k.name, "not selected (--knobs)")
        if k.name in pruned or len(k.values) < 2:
            continue
        if k.parent is not None and all(p.name != k.parent for p in kept):
            pruned[k.name] = f"needs {k.parent}"
            continue
        kept.append(k)
    return Space(tuple(kept), pruned)


def knob_order(space: Space, finding_ids: Iterable[str]) -> list[str]:
    """Top-level knobs to try, those the diagnosis points at first, then :data:`DEFAULT_ORDER`."""
    names = [k.name for k in space.top_level()]
    ordered: list[str] = []
    for fid in finding_ids:
        for name in FINDING_KNOBS.get(fid, ()):
            if name in names and name not in ordered:
                ordered.append(name)
    ordered += [n for n in DEFAULT_ORDER if n in names and n not in ordered]
    return ordered + [n for n in names if n not in ordered]


def to_config(assignment: Assignment, *, batch_size: int | None, seed: int) -> RuntimeConfig:
    """The :class:`RuntimeConfig` a trial runs, for a workload whose global batch is ``batch_size``.

    ``batch_size`` in the result is the micro-batch (global batch / gradient accumulation), or
    None (the workload's own) when there is no accumulation or the global batch is not known yet.
    """
    a = {**BASELINE, **assignment}
    accum = int(a["grad_accumulation"])
    # Strict fp32 for the reference: TF32 only when the precision knob asks for it.
    return RuntimeConfig(
        **{k: v for k, v in a.items() if k != "grad_accumulation"},
        allow_tf32=a["precision"] == "tf32",
        grad_accumulation=accum,
        batch_size=batch_size // accum if accum > 1 and batch_size else None,
        seed=seed,
    )
