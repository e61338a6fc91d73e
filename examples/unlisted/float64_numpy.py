"""A tabular regression model fed from numpy arrays. Planted: the arrays are float64 (numpy's
default), so the model was cast with .double() to match. --fixed converts the data to float32
and keeps the model in float32."""

import argparse

import _ab
import numpy as np
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    features = rng.standard_normal((8192, 384))
    targets = rng.standard_normal((8192, 1))
    model = nn.Sequential(
        nn.Linear(384, 768), nn.Tanh(), nn.Linear(768, 768), nn.Tanh(), nn.Linear(768, 1)
    )
    if args.fixed:
        xs, ys = torch.from_numpy(features).float(), torch.from_numpy(targets).float()
    else:
        xs, ys = torch.from_numpy(features), torch.from_numpy(targets)
        model = model.double()  # planted: matched to the float64 data
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        idx = torch.randint(0, 8192, (256,))
        loss = nn.functional.mse_loss(model(xs[idx]), ys[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
