"""Worker for test_runtime_ddp.py, run under ``torchrun --nproc_per_node=2``; writes one JSON file
per rank into the folder given as argv[1]."""

from __future__ import annotations

import atexit
import json
import logging
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

import torchdoctor as td
from torchdoctor.runtime import distributed

RESULT: dict[str, object] = {}


def _write_after_teardown() -> None:
    RESULT["group_destroyed_at_exit"] = not dist.is_initialized()
    (Path(sys.argv[1]) / f"rank{RESULT['rank']}.json").write_text(json.dumps(RESULT))


def dataset() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 8, generator=g), torch.randint(0, 3, (64,), generator=g)
    return list(zip(x, y, strict=True))


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


class Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.records += 1


def train(accumulation: int, steps: int) -> tuple[list[list[float]], int, td.Runtime]:
    rt = td.Runtime(
        precision="fp32",
        device="cpu",
        num_workers=0,
        grad_accumulation=accumulation,
        ddp_bucket_cap_mb=1.0 + accumulation,
    )
    net = model()
    net, opt = rt.setup(net, torch.optim.SGD(net.parameters(), lr=0.5))
    calls = [0]

    # DDP checks the hook's annotations at run time, so they must be real objects, not strings.
    def counting_allreduce(state, bucket):  # type: ignore[no-untyped-def]
        calls[0] += 1
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        return allreduce_hook(None, bucket)

    net._forward_module.register_comm_hook(None, counting_allreduce)
    RESULT[f"bucket_bytes_cap_{accumulation}"] = net._forward_module.bucket_bytes_cap
    loader = rt.loader(dataset(), batch_size=4, shuffle=False)
    for i, (x, y) in enumerate(loader):
        if i == steps * accumulation:
            break
        rt.backward(F.cross_entropy(net(x), y))
        rt.step(opt)
    return [p.detach().flatten().tolist() for p in net.parameters()], calls[0], rt


def main() -> None:
    # Registered before the runtime's own exit handler, so it runs after it (LIFO).
    atexit.register(_write_after_teardown)
    counter = Counter()
    logging.getLogger("torchdoctor.runtime").addHandler(counter)
    logging.getLogger("torchdoctor.runtime").setLevel(logging.INFO)
    params, calls, rt = train(accumulation=1, steps=3)
    RESULT.update(
        rank=rt.rank,
        world_size=rt.world_size,
        backend=rt.dist.backend,
        params=params,
        allreduce_calls=calls,
        created_here=distributed.created_here(),
    )
    params, calls, _ = train(accumulation=2, steps=2)
    RESULT.update(accum_params=params, accum_allreduce_calls=calls, log_records=counter.records)


if __name__ == "__main__":
    main()
