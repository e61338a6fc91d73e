"""A padded-sequence classifier: each batch holds sequences of different lengths, and the
loss masks the padding. Planted: the padding mask is built element by element in a double
Python loop. --fixed builds it with one comparison against torch.arange."""

import argparse

import _ab
import torch
from torch import nn


def padding_mask(lengths: torch.Tensor, t_max: int, fixed: bool) -> torch.Tensor:
    if fixed:
        return (torch.arange(t_max)[None, :] < lengths[:, None]).float()
    mask = torch.zeros(len(lengths), t_max)
    for b in range(len(lengths)):
        for t in range(int(lengths[b])):
            mask[b, t] = 1.0  # planted: one element per Python iteration
    return mask


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    batch, t_max, dim = 32, 48, 64
    model = nn.Sequential(nn.Linear(dim, 256), nn.GELU(), nn.Linear(256, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x = torch.randn(batch, t_max, dim)
        lengths = torch.randint(t_max // 4, t_max + 1, (batch,))
        y = torch.randn(batch, t_max)
        mask = padding_mask(lengths, t_max, args.fixed)
        err = (model(x).squeeze(-1) - y) ** 2
        loss = (err * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
