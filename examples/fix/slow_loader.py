"""Planted problem for `torchdoctor fix`: every item waits ~2 ms (reading and decoding a file)
and the DataLoader has no workers, so each step waits for its batch to be built in the
training process. The loader's call is spread over lines with a custom collate_fn: the fix
must keep all of it."""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class DecodedFiles(Dataset):
    """Stands in for reading and decoding one file per item: mostly waiting, little CPU."""

    def __len__(self) -> int:
        return 2048

    def __getitem__(self, i: int):
        time.sleep(0.002)  # read + decode
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 16, 16, generator=g), i % 10


def collate(batch):
    """Stack images; labels as one LongTensor."""
    xs, ys = zip(*batch, strict=True)
    return torch.stack(xs), torch.tensor(ys)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=16)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(768, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(
        DecodedFiles(),
        batch_size=args.batch_size,
        shuffle=True,
        collate_fn=collate,  # labels as a LongTensor
        drop_last=True,
    )
    step = 0
    while step < args.steps:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
