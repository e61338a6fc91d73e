"""Healthy control: batched inference of a convolutional classifier over a DataLoader, under
torch.inference_mode(), predictions kept on the tensor side; the images are in memory, so the
loader takes whole batches by index (a BatchSampler) instead of collating image by image; model
and images in channels_last, the memory format CPU pooling and convolution kernels run fastest
in (NCHW max pooling ran about 10x slower on an AMD EPYC with torch 2.13, and check rightly
named it: 20% of the machine's roofline)."""

import argparse

import _ab
import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

BATCH = 64


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true", help="no effect: nothing to fix")
    args = p.parse_args()
    torch.manual_seed(0)
    model = (
        nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * 8 * 8, 10),
        )
        .eval()
        .to(memory_format=torch.channels_last)
    )
    data = TensorDataset(torch.randn(BATCH * args.steps, 3, 32, 32))
    preds = []
    with torch.inference_mode():
        batches = BatchSampler(SequentialSampler(data), batch_size=BATCH, drop_last=False)
        for (x,) in DataLoader(data, sampler=batches, batch_size=None):
            preds.append(model(x.contiguous(memory_format=torch.channels_last)).argmax(1))
            _ab.tick()
    print(f"predicted {sum(len(p) for p in preds)} images")


if __name__ == "__main__":
    main()
