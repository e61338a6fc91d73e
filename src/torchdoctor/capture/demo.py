"""A small bundled training loop, profiled with torch.profiler, for ``torchdoctor demo``.

It has the most common real-world problem on purpose: the dataset does costly work per item and
the DataLoader runs it in the training process (num_workers=0), so the loop waits for data.
"""

from __future__ import annotations

import time
from pathlib import Path

ITEM_COST_S = 0.0015
"""CPU time each sample costs to produce (decoding, augmentation...)."""


def run_demo(out_dir: str, steps: int = 6, batch_size: int = 32) -> Path:
    """Train a small CNN for a few steps under the profiler; return the trace path (.json.gz)."""
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule
    from torch.utils.data import DataLoader, Dataset

    class SlowImages(Dataset[tuple[torch.Tensor, torch.Tensor]]):
        def __len__(self) -> int:
            return 10_000

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            time.sleep(ITEM_COST_S)  # stands in for JPEG decoding and augmentation
            g = torch.Generator().manual_seed(i)
            return torch.randn(3, 32, 32, generator=g), torch.tensor(i % 10)

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowImages(), batch_size=batch_size, num_workers=0)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "demo_trace.json.gz"
    sched = schedule(wait=1, warmup=1, active=steps, repeat=1)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=sched,
        on_trace_ready=lambda p: p.export_chrome_trace(str(trace)),
    ) as prof:
        for i, (x, y) in enumerate(loader):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            prof.step()
            if i + 1 >= steps + 2:
                break
    return trace
