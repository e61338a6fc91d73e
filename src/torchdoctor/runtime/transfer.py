"""Walking a batch's structure: apply a function to every tensor, keep everything else.

Batches are tensors inside tuples, lists, dicts, named tuples and dataclasses, nested freely;
the result has the same types and the same order.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

TensorFn = Callable[[torch.Tensor], torch.Tensor]


def map_tensors(obj: Any, fn: TensorFn) -> Any:
    """A copy of ``obj`` with ``fn`` applied to every tensor in it (containers rebuilt)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # named tuple
        return type(obj)(*(map_tensors(v, fn) for v in obj))
    if isinstance(obj, list | tuple):
        return type(obj)(map_tensors(v, fn) for v in obj)
    if isinstance(obj, Mapping):
        items = {k: map_tensors(v, fn) for k, v in obj.items()}
        if type(obj) is dict:
            return items
        try:
            return type(obj)(items)  # type: ignore[call-arg]  # OrderedDict, user mappings
        except TypeError:
            return items
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # Shallow copy + set, not dataclasses.replace: fields with init=False must survive.
        out = copy.copy(obj)
        for f in dataclasses.fields(obj):
            object.__setattr__(out, f.name, map_tensors(getattr(obj, f.name), fn))
        return out
    return obj


def iter_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``obj``, depth first, in the order ``map_tensors`` visits them."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from iter_tensors(v)
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from iter_tensors(v)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from iter_tensors(getattr(obj, f.name))


def to_channels_last(t: torch.Tensor) -> torch.Tensor:
    """4-D floating tensors (N, C, H, W images) in channels_last layout; others unchanged."""
    if t.dim() == 4 and t.is_floating_point():
        return t.contiguous(memory_format=torch.channels_last)
    return t


def tensor_mover(device: torch.device, *, channels_last: bool = False) -> TensorFn:
    """A function moving one tensor to ``device`` (non-blocking from pinned memory)."""

    def move(t: torch.Tensor) -> torch.Tensor:
        # non_blocking only helps from page-locked memory; from pageable memory it is a plain copy.
        out = t.to(device, non_blocking=t.is_pinned() if t.device.type == "cpu" else True)
        return to_channels_last(out) if channels_last else out

    return move


def _first_tensor(obj: Any) -> torch.Tensor | None:
    # The common batch shapes without a generator: this runs once per batch.
    if isinstance(obj, torch.Tensor):
        return obj if obj.dim() > 0 else None
    if isinstance(obj, list | tuple):
        for v in obj:
            t = _first_tensor(v)
            if t is not None:
                return t
        return None
    if isinstance(obj, Mapping) or (dataclasses.is_dataclass(obj) and not isinstance(obj, type)):
        return next((t for t in iter_tensors(obj) if t.dim() > 0), None)
    return None


def batch_counts(batch: Any) -> tuple[int, int | None]:
    """(samples, tokens) in a batch: the first tensor's leading dimension, and, when that tensor
    holds integer ids of shape (batch, sequence), its element count as tokens."""
    t = _first_tensor(batch)
    if t is None:
        return 0, None
    tokens = t.numel() if t.dim() == 2 and not t.is_floating_point() else None
    return int(t.shape[0]), tokens
