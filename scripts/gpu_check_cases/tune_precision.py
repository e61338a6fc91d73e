"""GPU check case for ``torchdoctor tune``: an MLP whose step is matmul-bound on a GPU, so a
faster precision (TF32, bf16) must win by far over the strict fp32 baseline, and the claim's
interval must clear the minimum gain. Searched with ``--knobs precision`` only, so no compiled
trial (and no max-autotune) can start.

    torchdoctor tune scripts/gpu_check_cases/tune_precision.py --knobs precision --max-trials 4
"""

import torch
from torch import nn

import torchdoctor as td
from torchdoctor.tune import Workload

WIDTH, DEPTH, BATCH = 2048, 4, 1024


@td.workload
def build(config):
    layers = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(WIDTH, 1))
    x = torch.randn(BATCH * 8, WIDTH)
    y = x[:, :1].sin() + 0.1 * torch.randn(BATCH * 8, 1)
    return Workload(
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4),
        dataset=torch.utils.data.TensorDataset(x, y),
        loss=lambda model, batch: nn.functional.mse_loss(model(batch[0]).float(), batch[1]),
        batch_size=BATCH,
    )
