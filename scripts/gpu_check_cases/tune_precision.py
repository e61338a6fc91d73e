"""GPU check case for ``torchdoctor tune``: an MLP whose step is GEMM-bound on a GPU, so a faster
precision (TF32, bf16) must win by far over the strict fp32 baseline, and the claim's interval
must clear the minimum gain. Searched with ``--knobs precision`` only, so no compiled trial (and no
max-autotune) can start.

The data lives on the device: the model holds the inputs and targets as buffers (moved with it)
and the loader carries only row indices, collated in one call. The earlier case fed 1024 rows of
2048 floats through the loader and waited on it 80% of the step on an H200, where no precision
could show a gain.

    torchdoctor tune scripts/gpu_check_cases/tune_precision.py --knobs precision --max-trials 4
"""

import torch
from torch import nn

import torchdoctor as td
from torchdoctor.tune import Workload

# 4 x (2048 x 4096 x 4096) GEMMs forward, twice that backward: about 0.8 TFLOP a step, ~15 ms
# in fp32 on an H200's CUDA cores, ~1-2 ms in bf16.
WIDTH, DEPTH, BATCH, ROWS = 4096, 4, 2048, 2048 * 8


class OnDevice(nn.Module):
    """The MLP with its data set as buffers: indexing them is the whole input pipeline."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        x = torch.randn(ROWS, WIDTH, generator=g)
        self.register_buffer("inputs", x)
        self.register_buffer("targets", x[:, :1].sin() + 0.1 * torch.randn(ROWS, 1, generator=g))
        layers: list[nn.Module] = []
        for _ in range(DEPTH):
            layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
        self.body = nn.Sequential(*layers, nn.Linear(WIDTH, 1))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.body(self.inputs[idx])


def indices(items: list[int]) -> torch.Tensor:
    """Collate a batch of row numbers into one tensor (module level: workers can pickle it)."""
    return torch.tensor(items, dtype=torch.long)


def mse(model: OnDevice, idx: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(model(idx).float(), model.targets[idx].float())


@td.workload
def build(config):
    model = OnDevice()
    return Workload(
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4),
        dataset=list(range(ROWS)),  # row numbers: nothing to read or copy but 16 KiB a batch
        loss=mse,
        batch_size=BATCH,
        collate_fn=indices,
    )
