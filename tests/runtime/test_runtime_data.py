"""Data to the device: structure and order preserved, loader defaults, DistributedSampler epochs."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import NamedTuple

import pytest
import torch
from torch.utils.data.distributed import DistributedSampler

import torchdoctor as td
from torchdoctor.config import RuntimeConfig
from torchdoctor.runtime.data import DevicePrefetcher, RuntimeLoader, build_dataloader, plan_loader
from torchdoctor.runtime.transfer import batch_counts, iter_tensors, map_tensors


class Pair(NamedTuple):
    image: torch.Tensor
    label: torch.Tensor


@dataclasses.dataclass
class Sample:
    pixels: torch.Tensor
    meta: dict[str, object]
    cached: int = dataclasses.field(default=0, init=False)


def _nested(i: int) -> object:
    s = Sample(
        torch.full((2, 3, 4, 4), float(i)), {"id": i, "mask": torch.ones(2, dtype=torch.bool)}
    )
    s.cached = 7
    return {
        "pair": Pair(torch.full((2, 1), float(i)), torch.tensor([i, i])),
        "list": [torch.arange(i, i + 2), "text"],
        "tuple": (s,),
        "od": OrderedDict(a=torch.zeros(1)),
    }


def _same(a: object, b: object) -> None:
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b) and a.dtype == b.dtype
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)  # type: ignore[arg-type]
        for x, y in zip(a, b, strict=True):  # type: ignore[call-overload]
            _same(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)  # type: ignore[call-overload]
        for k in a:
            _same(a[k], b[k])  # type: ignore[index]
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name))
    else:
        assert a == b


def test_map_tensors_keeps_every_container_type() -> None:
    batch = _nested(3)
    doubled = map_tensors(batch, lambda t: ~t if t.dtype == torch.bool else t * 2)
    undo = map_tensors(
        doubled, lambda t: ~t if t.dtype == torch.bool else t.div(2, rounding_mode="floor")
    )
    _same(undo, batch)
    assert doubled["tuple"][0].cached == 7  # init=False field kept
    assert doubled["pair"].label.tolist() == [6, 6]
    assert doubled is not batch and batch["pair"].label.tolist() == [3, 3]


def test_iter_tensors_order_and_counts() -> None:
    batch = _nested(1)
    assert [tuple(t.shape) for t in iter_tensors(batch)] == [
        (2, 1),
        (2,),
        (2,),
        (2, 3, 4, 4),
        (2,),
        (1,),
    ]
    assert batch_counts(batch) == (2, None)
    assert batch_counts({"ids": torch.zeros(4, 16, dtype=torch.long)}) == (4, 64)  # tokens
    assert batch_counts(["no tensors"]) == (0, None)


def test_prefetcher_preserves_structure_and_order_on_cpu() -> None:
    source = [_nested(i) for i in range(5)]
    seen: list[int] = []
    out = list(
        DevicePrefetcher(
            source,
            torch.device("cpu"),
            depth=2,
            on_batch=lambda b: seen.append(b["list"][0][0].item()),
        )
    )
    for want, got in zip(source, out, strict=True):
        _same(want, got)
    assert seen == [0, 1, 2, 3, 4]


def test_channels_last_applies_to_images_only() -> None:
    out = next(iter(DevicePrefetcher([_nested(0)], torch.device("cpu"), channels_last=True)))
    assert out["tuple"][0].pixels.is_contiguous(memory_format=torch.channels_last)
    assert not _nested(0)["tuple"][0].pixels.is_contiguous(memory_format=torch.channels_last)  # type: ignore[index]


def test_loader_defaults_and_overrides() -> None:
    cfg = RuntimeConfig()
    cpu = plan_loader(
        cfg, torch.device("cpu"), batch_size=8, local_world_size=1, distributed=False, overrides={}
    )
    assert not cpu.pin_memory and cpu.num_workers >= 1 and cpu.persistent_workers
    gpu = plan_loader(
        cfg,
        torch.device("cuda", 0),
        batch_size=8,
        local_world_size=64,
        distributed=True,
        overrides={},
    )
    assert (
        gpu.pin_memory
        and gpu.distributed_sampler
        and gpu.num_workers == 0
        and not gpu.persistent_workers
    )
    mine = plan_loader(
        RuntimeConfig(num_workers=4, prefetch_factor=3, batch_size=32),
        torch.device("cpu"),
        batch_size=8,
        local_world_size=1,
        distributed=False,
        overrides={"num_workers": 0},
    )
    assert (mine.num_workers, mine.prefetch_factor, mine.batch_size) == (0, None, 32)


def test_distributed_sampler_shards_and_reshuffles_each_epoch() -> None:
    data = list(range(16))
    plans = [
        plan_loader(
            RuntimeConfig(num_workers=0),
            torch.device("cpu"),
            batch_size=4,
            local_world_size=2,
            distributed=True,
            overrides={},
        )
        for _ in range(2)
    ]
    loaders = [
        RuntimeLoader(
            build_dataloader(
                data, plans[r], shuffle=True, rank=r, world_size=2, seed=0, overrides={}
            ),
            plans[r],
            lambda src: DevicePrefetcher(src, torch.device("cpu")),
        )
        for r in range(2)
    ]
    assert isinstance(loaders[0].sampler, DistributedSampler)
    epoch0 = [[int(v) for b in loader for v in b] for loader in loaders]
    epoch1 = [[int(v) for b in loader for v in b] for loader in loaders]
    assert sorted(epoch0[0] + epoch0[1]) == data  # the two ranks split the data
    assert epoch0[0] != epoch1[0]  # set_epoch reshuffled
    assert loaders[0].epoch == 2


def test_runtime_loader_counts_samples_and_tokens() -> None:
    rt = td.Runtime(device="cpu", num_workers=0)
    data = [{"ids": torch.zeros(12, dtype=torch.long)} for _ in range(8)]
    model = rt.setup(torch.nn.Linear(1, 1))
    for batch in rt.loader(data, batch_size=2):
        model(batch["ids"][:, :1].float())
        rt.step(torch.optim.SGD(model.parameters(), lr=0.0))
    s = rt.meter.summary()
    assert s.samples_per_s and s.tokens_per_s
    assert s.tokens_per_s == pytest.approx(12 * s.samples_per_s)


def test_to_device_keeps_structure() -> None:
    rt = td.Runtime(device="cpu")
    batch = _nested(2)
    _same(rt.to_device(batch), batch)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_side_stream_prefetch_equals_synchronous_copy() -> None:
    device = torch.device("cuda", 0)
    source = [_nested(i) for i in range(6)]
    pinned = [map_tensors(b, lambda t: t.pin_memory()) for b in source]
    got = list(DevicePrefetcher(pinned, device, depth=3))
    for host, dev in zip(source, got, strict=True):
        assert all(t.is_cuda for t in iter_tensors(dev))
        _same(map_tensors(dev, lambda t: t.cpu()), host)


def test_user_batch_sampler_and_sampler_are_respected() -> None:
    from torch.utils.data import BatchSampler, SequentialSampler

    rt = td.Runtime(device="cpu", num_workers=0)
    data = list(range(10))
    sampler = BatchSampler(SequentialSampler(data), batch_size=3, drop_last=False)
    assert [b.tolist() for b in rt.loader(data, batch_sampler=sampler)] == [
        [0, 1, 2],
        [3, 4, 5],
        [6, 7, 8],
        [9],
    ]
    reverse = list(range(9, -1, -1))
    assert [b.tolist() for b in rt.loader(data, batch_size=5, sampler=reverse)] == [
        reverse[:5],
        reverse[5:],
    ]
