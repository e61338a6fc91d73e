"""A reward-to-go regressor: each step's targets are the discounted running sums of a batch of
reward sequences. Planted: the running sum is computed one element at a time in a Python
loop. --fixed computes it for the whole batch with one reversed cumulative sum."""

import argparse

import _ab
import torch
from torch import nn


def returns(rewards: torch.Tensor, fixed: bool) -> torch.Tensor:
    if fixed:
        return rewards.flip(1).cumsum(1).flip(1)
    out = rewards.clone()
    for i in range(rewards.shape[1] - 2, -1, -1):
        for b in range(rewards.shape[0]):
            out[b, i] += out[b, i + 1]  # planted: one element per Python iteration
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    batch, horizon, dim = 16, 40, 32
    model = nn.Sequential(nn.Linear(dim, 128), nn.Tanh(), nn.Linear(128, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        obs = torch.randn(batch, horizon, dim)
        target = returns(torch.rand(batch, horizon), args.fixed)
        loss = nn.functional.mse_loss(model(obs).squeeze(-1), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
