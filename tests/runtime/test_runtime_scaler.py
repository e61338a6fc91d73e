"""fp16 GradScaler through the runtime: the loss is scaled, inf gradients skip the step, skipped
steps are counted and reported."""

from __future__ import annotations

import torch
from runtime_helpers import tiny_mlp

import torchdoctor as td


class RecordingSGD(torch.optim.SGD):
    """SGD that records every real step (a GradScaler skips the call on inf gradients)."""

    def __init__(self, params: object, lr: float) -> None:
        super().__init__(params, lr=lr)  # type: ignore[arg-type]
        self.calls = 0

    def step(self, closure: object = None) -> None:  # type: ignore[override]
        self.calls += 1
        super().step()


def _setup(init_scale: float = 1024.0) -> tuple[td.Runtime, torch.nn.Module, RecordingSGD]:
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    rt = td.Runtime(precision="fp16-mixed", device="cpu", scaler=scaler)
    model = tiny_mlp()
    opt = RecordingSGD(model.parameters(), lr=0.1)
    model, opt = rt.setup(model, opt)
    return rt, model, opt


def test_loss_is_scaled_before_backward() -> None:
    rt, model, _ = _setup(init_scale=1024.0)
    x = torch.randn(4, 8)
    reference = tiny_mlp()
    reference(x).float().sum().backward()
    rt.backward(model(x).float().sum())
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(got.grad, 1024.0 * want.grad, rtol=1e-5)


def test_inf_gradient_skips_step_and_is_counted() -> None:
    rt, model, opt = _setup(init_scale=1024.0)
    x = torch.randn(4, 8)
    trajectory = []
    for i in range(4):
        loss = model(x).float().sum()
        if i == 1:
            loss = loss * float("inf")  # an overflow: the scaler must skip this step
        rt.backward(loss)
        before = [p.detach().clone() for p in model.parameters()]
        rt.step(opt)
        changed = any(
            not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True)
        )
        trajectory.append((changed, rt.scaler.get_scale()))
    assert [c for c, _ in trajectory] == [True, False, True, True]
    # The scale halves on the skipped step and stays there (growth needs 2000 clean steps).
    assert [s for _, s in trajectory] == [1024.0, 512.0, 512.0, 512.0]
    assert opt.calls == 3
    summary = rt.meter.summary()
    assert summary.skipped_steps == 1
    assert "skipped steps        : 1" in str(summary)
    assert all(p.grad is None for p in model.parameters())  # zeroed after every step
