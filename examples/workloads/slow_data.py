"""A data pipeline slower than the model: each sample costs ~1 ms to "read and decode" (a sleep
standing in for file I/O, plus a little CPU work), so the training step waits on data. DataLoader
workers overlap that wait with the step; persistent workers save the worker start-up every epoch.

    torchdoctor tune examples/workloads/slow_data.py --budget 5m
"""

import time

import torch
from torch import nn

import torchdoctor as td
from torchdoctor.tune import Workload

SAMPLES, FEATURES, BATCH = 256, 128, 32


class SlowDataset(torch.utils.data.Dataset):
    """Deterministic samples that take about a millisecond each to produce."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(SAMPLES, FEATURES, generator=g)
        self.y = (self.x[:, :8].sum(dim=1) > 0).long()

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int):
        time.sleep(0.001)  # waiting on storage: the GIL is free, other workers proceed
        x = self.x[i]
        for _ in range(3):  # a little decoding work
            x = torch.tanh(x * 1.01)
        return x, self.y[i]


@td.workload
def build(config):
    model = nn.Sequential(nn.Linear(FEATURES, 256), nn.ReLU(), nn.Linear(256, 2))
    return Workload(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
        dataset=SlowDataset(),
        loss=lambda model, batch: nn.functional.cross_entropy(model(batch[0]), batch[1]),
        batch_size=BATCH,
    )
