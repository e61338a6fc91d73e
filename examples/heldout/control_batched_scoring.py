"""Healthy control: batched inference scoring under torch.inference_mode() through a small
scoring closure, whole batches at a time."""

import argparse

import torch
from torch import nn


def make_scorer(model: nn.Module):
    model.eval()

    @torch.inference_mode()
    def score(batch: torch.Tensor) -> torch.Tensor:
        return model(batch).softmax(-1)

    return score


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=60)
    args = p.parse_args()
    torch.manual_seed(0)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(128, 4, 256, batch_first=True), 2)
    model = nn.Sequential(enc, nn.Flatten(), nn.Linear(16 * 128, 3))
    score = make_scorer(model)
    out = []
    for _ in range(args.iters):
        out.append(score(torch.randn(32, 16, 128)))


if __name__ == "__main__":
    main()
