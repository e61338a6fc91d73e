"""Planted problem: each item costs ~1.5 ms to prepare and the DataLoader has num_workers=0,
so every step waits for its batch to be built in the training process."""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class DecodedImages(Dataset):
    """Stands in for decoding and augmenting an image: costly per item."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int):
        time.sleep(0.0015)  # decode + augment
        g = torch.Generator().manual_seed(i)
        return torch.randn(256, generator=g), i % 10


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=16)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # bf16 autocast and TF32 where tensor cores run them (sm80+), so that the planted problem
    # is the only one on a GPU too.
    amp = device == "cuda" and torch.cuda.get_device_capability()[0] >= 8
    torch.backends.cuda.matmul.allow_tf32 = True
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    loader = DataLoader(DecodedImages(), batch_size=args.batch_size, shuffle=True, num_workers=0)
    step = 0
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
