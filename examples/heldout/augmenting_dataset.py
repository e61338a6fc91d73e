"""Image-like training fed by a Dataset whose __getitem__ does per-sample augmentation work in
Python, loaded in the main process (num_workers left at its default 0)."""

import argparse
import math

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class JitterDataset(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        img = torch.rand(3, 24, 24, generator=g)
        # slow hand-written augmentation: a per-row phase shift computed in Python
        for r in range(24):
            img[:, r] = torch.roll(img[:, r], shifts=int(3 * math.sin(r + i)), dims=-1)
        return img, i % 5


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    args = p.parse_args()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 24 * 24, 128), nn.ReLU(), nn.Linear(128, 5))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    feed = DataLoader(JitterDataset(2048), batch_size=32, shuffle=True)
    for _ in range(args.epochs):
        for imgs, cls in feed:
            loss = nn.functional.cross_entropy(net(imgs), cls)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
