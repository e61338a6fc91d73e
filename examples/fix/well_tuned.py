"""No planted problem (for `torchdoctor fix`: the patch must be empty): the data lives in
memory and each batch is gathered with one indexing op, the optimizer is fused, the loss is
summed on the device and read every 50 steps."""

import argparse

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    xs = torch.randn(4096, 256)
    ys = torch.randint(0, 10, (4096,))
    running = torch.zeros(())
    for step in range(args.steps):
        idx = torch.randint(0, xs.shape[0], (256,))
        loss = nn.functional.cross_entropy(model(xs[idx]), ys[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        running += loss.detach()
        if (step + 1) % 50 == 0:
            print(f"step {step + 1} mean loss {float(running) / 50:.4f}")
            running.zero_()


if __name__ == "__main__":
    main()
