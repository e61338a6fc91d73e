"""No planted problem: the data lives on the device, a fused optimizer, bf16
autocast on GPUs that have bf16 tensor cores, and the loss read only every 100 steps."""

import argparse

import torch
from torch import nn


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
    # The dataset fits in device memory: keep it there and gather each batch with one
    # indexing op (no per-item Python, no host-to-device copy per step).
    xs = torch.randn(4096, 512, device=device)
    ys = torch.randint(0, 10, (4096,), device=device)
    for step in range(args.steps):
        idx = torch.randint(0, xs.shape[0], (128,), device=device)
        x, y = xs[idx], ys[idx]
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
