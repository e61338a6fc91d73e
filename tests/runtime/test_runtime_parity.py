"""The runtime with fp32, no compile and no prefetch is the hand-written loop, bit for bit."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from runtime_helpers import batches, tiny_mlp

import torchdoctor as td


def _hand_written(data: list[dict[str, torch.Tensor]], accumulation: int = 1) -> list[torch.Tensor]:
    model = tiny_mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for i, batch in enumerate(data):
        loss = F.cross_entropy(model(batch["x"]), batch["y"])
        (loss / accumulation if accumulation > 1 else loss).backward()
        if (i + 1) % accumulation == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


def _runtime(data: list[dict[str, torch.Tensor]], **settings: object) -> list[torch.Tensor]:
    rt = td.Runtime(precision="fp32", compile="off", device_prefetch=0, device="cpu", **settings)
    model = tiny_mlp()
    model, opt = rt.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    for batch in data:
        with rt.autocast():
            loss = F.cross_entropy(model(batch["x"]), batch["y"])
        rt.backward(loss)
        rt.step(opt)
    return [p.detach().clone() for p in model.module.parameters()]


def test_bitwise_parity_with_hand_written_loop() -> None:
    data = batches(12)
    want, got = _hand_written(data), _runtime(data)
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    # ...and training did move the weights (the comparison is not between two initial states).
    assert not torch.equal(want[0], tiny_mlp().state_dict()["0.weight"])


def test_bitwise_parity_with_accumulation() -> None:
    data = batches(12)
    want = _hand_written(data, accumulation=3)
    assert all(
        torch.equal(a, b) for a, b in zip(want, _runtime(data, grad_accumulation=3), strict=True)
    )
    # A different accumulation count gives different weights, so the test can tell them apart.
    other = _hand_written(data, accumulation=1)
    assert not all(torch.equal(a, b) for a, b in zip(want, other, strict=True))


def test_accumulate_context_manager_steps_every_n() -> None:
    rt = td.Runtime(precision="fp32", device="cpu")
    model = tiny_mlp()
    model, opt = rt.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    stepped = []
    with rt.accumulate(4):
        for batch in batches(8):
            rt.backward(F.cross_entropy(model(batch["x"]), batch["y"]))
            stepped.append(rt.step(opt))
    assert stepped == [False, False, False, True] * 2
    assert rt.meter.steps == 2


def test_loader_loop_matches_hand_written() -> None:
    # Through rt.loader (no workers, fixed order) the result is still the hand-written one.
    data = batches(6)
    dataset = [(b["x"][i], b["y"][i]) for b in data for i in range(4)]
    rt = td.Runtime(precision="fp32", device="cpu", num_workers=0)
    model = tiny_mlp()
    model, opt = rt.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    for x, y in rt.loader(dataset, batch_size=4, shuffle=False):
        rt.backward(F.cross_entropy(model(x), y))
        rt.step(opt)
    want = _hand_written(data)
    assert all(torch.equal(a, b) for a, b in zip(want, model.module.parameters(), strict=True))
    summary = rt.meter.summary()
    assert summary.steps == 4  # 6 steps: the first (warm-up) and the FLOP-counting one left out
    assert summary.samples_per_s is not None and summary.samples_per_s > 0
