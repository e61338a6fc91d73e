"""Regression training whose seeding helper (in another module) also switches on
deterministic algorithms, which nobody compares bit for bit."""

import argparse

import torch
from _runtime import mlp, seed_everything


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=60)
    args = p.parse_args()
    seed_everything(1234)
    net = mlp(384, 6, 1)
    sgd = torch.optim.SGD(net.parameters(), lr=1e-3)
    feats, target = torch.randn(4096, 384), torch.randn(4096, 1)
    for _ in range(args.iters):
        rows = torch.randint(0, 4096, (128,))
        err = torch.nn.functional.smooth_l1_loss(net(feats[rows]), target[rows])
        sgd.zero_grad()
        err.backward()
        sgd.step()


if __name__ == "__main__":
    main()
