"""DistributedDataParallel training for torchrun (gloo on CPU, NCCL on CUDA):

torchrun --nproc_per_node=2 -m torchdoctor check examples/check/ddp_train.py
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    try:
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
        ddp = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
        opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, fused=True)
        data = TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,)))
        sampler = DistributedSampler(data, shuffle=True, drop_last=True)
        # Whole batches by one indexing op: no per-item lookups and collate in the step.
        batches = BatchSampler(sampler, batch_size=64, drop_last=True)
        loader = DataLoader(data, batch_size=None, sampler=batches, pin_memory=cuda)
        step, epoch = 0, 0
        while step < args.steps:
            sampler.set_epoch(epoch)
            for x, y in loader:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                loss = nn.functional.cross_entropy(ddp(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
                if step >= args.steps:
                    break
            epoch += 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
