"""A wide MLP where bf16 autocast is slower than fp32 on a CPU without AMX: the casts to and from
bf16 cost more than the bf16 matmuls save. A tuner that assumes "lower precision is faster" picks
bf16 here; torchdoctor measures it and keeps fp32.

    torchdoctor tune examples/workloads/bf16_slower.py --budget 5m
"""

import torch
from torch import nn

import torchdoctor as td
from torchdoctor.tune import Workload

WIDTH, BATCH = 512, 64


@td.workload
def build(config):
    layers = []
    for _ in range(4):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(WIDTH, 10))
    x = torch.randn(BATCH * 8, WIDTH)
    y = torch.randint(0, 10, (BATCH * 8,))
    return Workload(
        model=model,
        # Plain SGD: the optimizer's implementation barely matters, so precision is the big knob.
        optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
        dataset=torch.utils.data.TensorDataset(x, y),
        loss=lambda model, batch: nn.functional.cross_entropy(model(batch[0]), batch[1]),
        batch_size=BATCH,
    )
