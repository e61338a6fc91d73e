"""Feeding the device: a DataLoader with defaults that keep a GPU busy, and a device prefetcher.

The prefetcher copies batch ``i + depth`` to the GPU on a side CUDA stream while batch ``i`` is
computed. Two things make that race-free: the compute stream waits on an event recorded after
each batch's copies, and ``record_stream`` tells the caching allocator that the compute stream
uses the batch, so its memory is not handed out again until that stream is done with it. A batch
that is already on the GPU is read on the side stream only after the stream that produced it.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset
from torch.utils.data.distributed import DistributedSampler

from torchdoctor.capture.cpu_usage import usable_cores
from torchdoctor.config import RuntimeConfig
from torchdoctor.runtime.transfer import iter_tensors, map_tensors, tensor_mover, to_channels_last

BatchHook = Callable[[Any], None]


@dataclass(frozen=True)
class LoaderPlan:
    """The DataLoader settings the runtime chose (after user overrides)."""

    batch_size: int | None
    """Samples per batch on this process (None: the dataset yields whole batches)."""
    num_workers: int
    """Worker processes."""
    pin_memory: bool
    """Page-locked host batches (needed for asynchronous host-to-device copies)."""
    persistent_workers: bool
    """Workers kept alive across epochs."""
    prefetch_factor: int | None
    """Batches each worker loads ahead (None: torch's default)."""
    distributed_sampler: bool
    """Whether a DistributedSampler shards the dataset across processes."""


def default_workers(local_world_size: int) -> int:
    """CPUs per local rank, at most 8: more workers than that rarely help and cost memory."""
    return max(0, min(8, usable_cores() // max(1, local_world_size)))


def plan_loader(
    config: RuntimeConfig,
    device: torch.device,
    *,
    batch_size: int | None,
    local_world_size: int,
    distributed: bool,
    overrides: dict[str, Any],
) -> LoaderPlan:
    """Resolve the loader settings: explicit keyword > configuration > machine default."""
    workers = overrides.get("num_workers", config.num_workers)
    if workers is None:
        workers = default_workers(local_world_size)
    pin = overrides.get("pin_memory", config.pin_memory)
    persistent = overrides.get("persistent_workers", config.persistent_workers)
    prefetch = overrides.get("prefetch_factor", config.prefetch_factor)
    return LoaderPlan(
        batch_size=config.batch_size or batch_size,
        num_workers=workers,
        # Pinned memory only pays with an accelerator; on the CPU it only warns.
        pin_memory=device.type == "cuda" if pin is None else bool(pin),
        persistent_workers=workers > 0 if persistent is None else bool(persistent and workers > 0),
        prefetch_factor=prefetch if workers > 0 else None,
        distributed_sampler=distributed and "sampler" not in overrides,
    )


def build_dataloader(
    dataset: Dataset[Any],
    plan: LoaderPlan,
    *,
    shuffle: bool,
    rank: int,
    world_size: int,
    seed: int,
    overrides: dict[str, Any],
) -> DataLoader[Any]:
    """A DataLoader built from ``plan``; keywords in ``overrides`` pass straight through."""
    kwargs: dict[str, Any] = dict(overrides)
    kwargs.update(
        num_workers=plan.num_workers,
        pin_memory=plan.pin_memory,
        persistent_workers=plan.persistent_workers,
    )
    if "batch_sampler" not in kwargs:  # DataLoader rejects batch_size next to a batch_sampler
        kwargs["batch_size"] = plan.batch_size
    if plan.prefetch_factor is not None:
        kwargs["prefetch_factor"] = plan.prefetch_factor
    iterable = isinstance(dataset, IterableDataset)
    if plan.distributed_sampler and not iterable:
        kwargs["sampler"] = DistributedSampler(
            dataset,
            num_replicas=world_size,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=bool(overrides.get("drop_last", False)),
        )
    elif not iterable and "sampler" not in kwargs and "batch_sampler" not in kwargs:
        kwargs["shuffle"] = shuffle
    return DataLoader(dataset, **kwargs)


class DevicePrefetcher:
    """Iterates ``source`` and yields each batch on ``device``, ``depth`` batches ahead on CUDA."""

    def __init__(
        self,
        source: Iterable[Any],
        device: torch.device,
        *,
        depth: int = 2,
        channels_last: bool = False,
        on_batch: BatchHook | None = None,
    ) -> None:
        self.source = source
        self.device = device
        self.depth = depth
        self.channels_last = channels_last
        self.on_batch = on_batch

    def __iter__(self) -> Iterator[Any]:
        if self.device.type == "cuda" and self.depth > 0:
            return self._iter_side_stream()
        return self._iter_inline()

    def _iter_inline(self) -> Iterator[Any]:
        # CPU: batches are already where they will be used; touch them only when asked to.
        hook = self.on_batch
        move = None
        if self.device.type != "cpu":
            move = tensor_mover(self.device, channels_last=self.channels_last)
        elif self.channels_last:
            move = to_channels_last
        for batch in self.source:
            if hook is not None:
                hook(batch)
            yield batch if move is None else map_tensors(batch, move)

    def _iter_side_stream(self) -> Iterator[Any]:
        stream = torch.cuda.Stream(self.device)
        move = tensor_mover(self.device, channels_last=self.channels_last)
        source = iter(self.source)
        queue: deque[tuple[Any, Any, Any]] = deque()

        def load() -> None:
            try:
                host = next(source)
            except StopIteration:
                return
            on_device = [t for t in iter_tensors(host) if not t.is_cpu]
            if on_device:
                # A batch already on the GPU was written by the stream that made it (the compute
                # stream, or the loader's): the side stream's copy or channels_last conversion
                # must not read it before that work is done.
                stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                batch = map_tensors(host, move)
                copied = torch.cuda.Event()
                copied.record(stream)
            for t in on_device:  # the side stream reads them: keep their memory until it is done
                _record(t, stream)
            queue.append((host, batch, copied))

        for _ in range(self.depth):
            load()
        while queue:
            host, batch, copied = queue.popleft()
            compute = torch.cuda.current_stream(self.device)
            compute.wait_event(copied)
            map_tensors(batch, functools.partial(_record, stream=compute))
            # Counted when the loop takes it, not when it is copied ahead: a step's samples are
            # the batch it trains on (counting at load put `depth` batches in the first step).
            if self.on_batch is not None:
                self.on_batch(host)
            load()  # start the next copy before handing this batch to the compute stream
            yield batch


def _record(t: torch.Tensor, stream: Any) -> torch.Tensor:
    if t.is_cuda:
        t.record_stream(stream)
    return t


class RuntimeLoader:
    """A DataLoader plus the device prefetcher; calls ``set_epoch`` on a DistributedSampler."""

    def __init__(
        self,
        dataloader: DataLoader[Any],
        plan: LoaderPlan,
        prefetch: Callable[[Iterable[Any]], DevicePrefetcher],
    ) -> None:
        self.dataloader = dataloader
        self.plan = plan
        self.epoch = 0
        self._prefetch = prefetch

    @property
    def sampler(self) -> Any:
        """The DataLoader's sampler (a DistributedSampler under DDP)."""
        return self.dataloader.sampler

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch the next iteration shuffles for (otherwise it counts up by itself)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.dataloader)

    def __iter__(self) -> Iterator[Any]:
        # Without set_epoch a DistributedSampler repeats the same order every epoch.
        if isinstance(self.dataloader.sampler, DistributedSampler):
            self.dataloader.sampler.set_epoch(self.epoch)
        self.epoch += 1
        return iter(self._prefetch(self.dataloader))
