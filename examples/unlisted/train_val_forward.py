"""A regression MLP that reports its validation loss at every step. Planted: the validation
forward runs with grad on, so it records a graph nobody uses. --fixed wraps it in
torch.no_grad()."""

import argparse
import contextlib

import _ab
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(128, 512), nn.SiLU(), nn.Linear(512, 512), nn.SiLU(), nn.Linear(512, 1)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x_tr, y_tr = torch.randn(4096, 128), torch.randn(4096, 1)
    x_val, y_val = torch.randn(1024, 128), torch.randn(1024, 1)
    history = []
    for _ in range(args.steps):
        idx = torch.randint(0, 4096, (256,))
        loss = nn.functional.mse_loss(model(x_tr[idx]), y_tr[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad() if args.fixed else contextlib.nullcontext():
            val = nn.functional.mse_loss(model(x_val), y_val)  # planted: recorded for nothing
        history.append(float(val.detach()))
        _ab.tick()
    print(f"final val {history[-1]:.4f}")


if __name__ == "__main__":
    main()
