"""Training that draws each batch with next(iter(loader)). Planted: the loader has worker
processes, and every iter() starts them again (and the old ones shut down), every step.
--fixed keeps one iterator for the whole run."""

import argparse

import _ab
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Noisy(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, generator=g), torch.tensor(i % 10)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Noisy(), batch_size=64, shuffle=True, num_workers=2)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    it = iter(loader) if args.fixed else None
    for _ in range(args.steps):
        if it is not None:
            x, y = next(it)
        else:
            x, y = next(iter(loader))  # planted: new worker processes every step
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
