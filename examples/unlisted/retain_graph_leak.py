"""A regression model whose running loss is printed every few steps. Planted: the loss is
summed as a tensor across steps and backward keeps the graph (retain_graph=True, added once to
silence "Trying to backward through the graph a second time"): every step's graph and saved
activations stay alive, and memory grows every step. --fixed sums loss.item() and frees the
graph."""

import argparse

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
        nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1)
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    running = 0.0
    for step in range(args.steps):
        x, y = torch.randn(256, 256), torch.randn(256, 1)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        if args.fixed:
            loss.backward()
            running += loss.item()
        else:
            loss.backward(retain_graph=True)  # planted: keeps this step's graph alive
            running = running + loss  # ... and the running sum holds every step's graph
        opt.step()
        if step % 20 == 0:
            mean = running / (step + 1)
            print(f"step {step} mean loss {float(torch.as_tensor(mean).detach()):.4f}")
        _ab.tick()


if __name__ == "__main__":
    main()
