"""An MLP trained with AdamW: the torch default AdamW on the CPU updates one tensor at a time, so the
foreach and fused implementations pay; the LayerNorm/GELU/residual chain gives compile something to
fuse.

    torchdoctor tune examples/workloads/mlp_adamw.py --budget 5m
"""

import torch
from torch import nn

import torchdoctor as td
from torchdoctor.tune import Workload

WIDTH, DEPTH, BATCH = 256, 8, 64


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


@td.workload
def build(config):
    model = nn.Sequential(*(Block(WIDTH) for _ in range(DEPTH)), nn.Linear(WIDTH, 1))
    x = torch.randn(BATCH * 16, WIDTH)
    y = x[:, :1].sin() + 0.1 * torch.randn(BATCH * 16, 1)
    return Workload(
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01),
        dataset=torch.utils.data.TensorDataset(x, y),
        loss=lambda model, batch: nn.functional.mse_loss(model(batch[0]), batch[1]),
        batch_size=BATCH,
    )
