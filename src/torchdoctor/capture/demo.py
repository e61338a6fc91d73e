"""A small bundled training loop, profiled with torch.profiler, for ``torchdoctor demo``.

It has the most common real-world problem on purpose: the dataset does costly work per item and
the DataLoader runs it in the training process (num_workers=0), so the loop waits for data.

The share that waiting holds depends on the machine: with other processes holding the cores the
model's own operators run slower while the data's sleep does not, so the same loop reads "77%
data loading" on an idle 2-core machine and "24%" beside two busy processes. The CPU's counters
over the profiled steps are recorded (``capture/cpu_usage``, as ``check`` records them) so the
demo can say so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ITEM_COST_S = 0.0015
"""CPU time each sample costs to produce (decoding, augmentation...)."""


@dataclass(frozen=True)
class DemoRun:
    """What the demo made."""

    trace: Path
    """The profiler's trace (.json.gz)."""
    cpu: dict[str, Any] | None
    """The CPU over the profiled steps (``cpu_usage.window_record``, with a ``thread_probe`` when
    the threads outnumbered the free cores); None where the counters could not be read."""


def run_demo(out_dir: str, steps: int = 6, batch_size: int = 32) -> DemoRun:
    """Train a small CNN for a few steps under the profiler, reading the CPU's counters over the
    profiled steps."""
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
        window = _CpuWindow()
        for i, (x, y) in enumerate(loader):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            last = i + 1 >= steps + 2
            if last:
                window.end()  # before the step that exports the trace
            prof.step()
            if i == 1:  # the first profiled step (wait 1, warm-up 1) starts with its batch
                window.start()
            if last:
                break
    return DemoRun(trace, window.record())


class _CpuWindow:
    """The CPU's counters at the profiled steps' ends; a failure to read them is no record,
    never the demo's failure."""

    def __init__(self) -> None:
        self._a: Any = None
        self._cpu: dict[str, Any] | None = None

    def start(self) -> None:
        from torchdoctor.capture import cpu_usage

        try:
            self._a = cpu_usage.sample()
        except Exception:
            self._a = None

    def end(self) -> None:
        if self._a is None:
            return
        import torch

        from torchdoctor.capture import cpu_usage

        try:
            b = cpu_usage.sample()
            cpu = cpu_usage.window_record(
                self._a,
                b,
                cpu_usage.main_thread_id(),
                torch.get_num_threads(),
                torch.get_num_interop_threads(),
            )
            self._cpu = cpu
        except Exception:
            self._cpu = None

    def record(self) -> dict[str, Any] | None:
        """The window's record; after the profiler stopped, when the counters say the threads
        outnumbered the free cores, what that thread count costs here now (``check``'s probe)."""
        from torchdoctor.capture import cpu_usage
        from torchdoctor.rules.cpu_rules import cpu_demand

        cpu = self._cpu
        try:
            d = cpu_demand(cpu) if cpu is not None else None
            if cpu is not None and d is not None and d.oversubscribed:
                cpu["thread_probe"] = cpu_usage.thread_probe(d.threads, d.suggested_threads)
        except Exception as exc:  # a measurement of ours: the record stands without it
            if cpu is not None:
                cpu["thread_probe"] = {"error": f"{type(exc).__name__}: {exc}"}
        return cpu
