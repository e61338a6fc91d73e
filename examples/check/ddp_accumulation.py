"""DDP over gloo with gradient accumulation (4 micro-batches per optimizer step) and no
no_sync(): every micro-batch's backward all-reduces the gradients.

torchrun --nproc_per_node=2 -m torchdoctor check examples/check/ddp_accumulation.py
"""

import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    no_sync = "--no-sync" in sys.argv
    dist.init_process_group("gloo")
    try:
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
        )
        ddp = DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        micro = [(torch.randn(16, 256), torch.randint(0, 10, (16,))) for _ in range(4)]
        for _ in range(30):
            for i, (x, y) in enumerate(micro):
                if no_sync and i < len(micro) - 1:
                    with ddp.no_sync():
                        nn.functional.cross_entropy(ddp(x), y).backward()
                else:
                    nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
