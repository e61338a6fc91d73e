"""A sequence model trained on synthetic data. Planted: torch.use_deterministic_algorithms(True)
is set for "reproducible" runs, in a job whose results are never compared bit for bit.
--fixed leaves the default."""

import argparse

import _ab
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    if not args.fixed:
        torch.use_deterministic_algorithms(True)  # planted
    torch.manual_seed(0)
    emb = nn.Embedding(2000, 64)
    enc = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    out = nn.Linear(64, 2000)
    opt = torch.optim.Adam([*emb.parameters(), *enc.parameters(), *out.parameters()], lr=1e-3)
    for _ in range(args.steps):
        tokens = torch.randint(0, 2000, (16, 32))
        h = enc(emb(tokens))
        loss = nn.functional.cross_entropy(out(h).flatten(0, 1), tokens.roll(-1, 1).flatten())
        buf = torch.empty(16, 32, 64)  # scratch space the step fills itself
        buf.copy_(h.detach())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
