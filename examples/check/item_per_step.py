"""Planted problem: the loss is read with .item() every step for logging; on a GPU each read
waits for all queued work, so the CPU stops feeding the GPU."""

import argparse

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # bf16 autocast and TF32 where tensor cores run them (sm80+), so that the planted problem
    # is the only one on a GPU too.
    amp = device == "cuda" and torch.cuda.get_device_capability()[0] >= 8
    torch.backends.cuda.matmul.allow_tf32 = True
    model = nn.Sequential(
        nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 10)
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    x = torch.randn(128, 512, device=device)
    y = torch.randint(0, 10, (128,), device=device)
    running = 0.0
    for _ in range(args.steps):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        running += loss.item()  # a host sync every step
    print(f"mean loss {running / args.steps:.4f}")


if __name__ == "__main__":
    main()
