"""Train a small classifier with the torchdoctor runtime.

Runs alone or under torchrun, on a CPU or a GPU, without changes:

    python examples/train_runtime.py
    python examples/train_runtime.py --config torchdoctor.toml
    torchrun --nproc_per_node=2 examples/train_runtime.py --precision fp32

The runtime chooses the precision for the hardware, wraps the model in DDP under torchrun, shards
the data, copies batches to the GPU ahead of use, and measures step time, throughput and MFU.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

import torchdoctor as td


class Blobs(Dataset[dict[str, torch.Tensor]]):
    """Gaussian blobs around fixed centres: a task a small MLP learns in a few epochs."""

    def __init__(self, n: int, features: int = 32, classes: int = 4, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        centres = torch.randn(classes, features, generator=g) * 0.3
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.x = centres[self.y] + torch.randn(n, features, generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "y": self.y[i]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="a torchdoctor TOML file (settings below override it)")
    parser.add_argument(
        "--precision", default=None, help="auto, fp32, tf32, bf16-mixed, fp16-mixed"
    )
    parser.add_argument(
        "--compile", default=None, help="off, default, reduce-overhead, max-autotune"
    )
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    settings = {
        k: v for k, v in {"precision": args.precision, "compile": args.compile}.items() if v
    }
    rt = td.Runtime.from_file(args.config, **settings) if args.config else td.Runtime(**settings)

    model = nn.Sequential(
        nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = rt.setup(model, optimizer)
    # Workers cost more than they save on an in-memory dataset; a real one keeps the default.
    loader = rt.loader(Blobs(4096), batch_size=args.batch_size, shuffle=True, num_workers=0)

    for epoch in range(args.epochs):
        correct = seen = 0
        for batch in loader:
            with rt.autocast():
                logits = model(batch["x"])
                loss = F.cross_entropy(logits, batch["y"])
            rt.backward(loss)
            rt.step(optimizer)
            correct += int((logits.argmax(1) == batch["y"]).sum())
            seen += len(batch["y"])
        rt.print(
            f"epoch {epoch}: loss {loss.item():.4f}, train accuracy {correct / seen:.3f} (rank 0)"
        )

    rt.print(rt.meter.summary())
    rt.print(
        {
            k: v
            for k, v in rt.config_dict().items()
            if k in ("precision", "precision_reason", "device", "world_size")
        }
    )


if __name__ == "__main__":
    main()
