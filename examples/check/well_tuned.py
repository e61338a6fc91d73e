"""No planted problem: batches already in memory (pinned on CUDA), a fused optimizer, bf16
autocast on GPUs that have bf16 tensor cores, and the loss read only every 100 steps."""

import argparse

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    # bf16 only where tensor cores run it; on CPUs without AMX it is slower than fp32.
    amp = cuda and torch.cuda.get_device_capability()[0] >= 8
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = nn.Sequential(
        nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 10)
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    data = TensorDataset(torch.randn(4096, 512), torch.randint(0, 10, (4096,)))
    # One indexing op per batch instead of 128 per-item lookups and a collate.
    batches = BatchSampler(RandomSampler(data), batch_size=128, drop_last=True)
    loader = DataLoader(data, batch_size=None, sampler=batches, pin_memory=cuda)
    step = 0
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if step % 100 == 0:
                print(f"step {step} loss {loss.item():.4f}")
            step += 1
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
