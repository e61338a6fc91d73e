"""Evaluation of a trained convolutional classifier over a held-out set. Planted: the loop
runs with autograd recording (no torch.no_grad / inference_mode). --fixed adds
torch.inference_mode()."""

import argparse
import contextlib

import _ab
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 8 * 8, 256),
        nn.ReLU(),
        nn.Linear(256, 10),
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = make_model().eval()
    data = TensorDataset(
        torch.randn(64 * args.steps, 3, 32, 32), torch.randint(0, 10, (64 * args.steps,))
    )
    loader = DataLoader(data, batch_size=64)
    correct = total = 0
    ctx = torch.inference_mode() if args.fixed else contextlib.nullcontext()
    with ctx:
        for x, y in loader:
            logits = model(x)  # the planted mistake: autograd records this forward
            correct += int((logits.argmax(1) == y).sum())
            total += len(y)
            _ab.tick()
    print(f"accuracy {correct / total:.3f}")


if __name__ == "__main__":
    main()
