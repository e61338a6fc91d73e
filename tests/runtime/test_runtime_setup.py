"""rt.setup and the constructor's side effects: seeding, channels_last, the returned wrapper."""

from __future__ import annotations

import pytest
import torch
from runtime_helpers import tiny_mlp
from torch import nn

import torchdoctor as td
from torchdoctor.errors import UserError


def test_seed_is_applied() -> None:
    td.Runtime(device="cpu", seed=1234)
    first = torch.rand(3)
    td.Runtime(device="cpu", seed=1234)
    assert torch.equal(first, torch.rand(3)) and torch.initial_seed() == 1234


def test_channels_last_model_and_batches() -> None:
    rt = td.Runtime(device="cpu", channels_last=True)
    conv = rt.setup(nn.Conv2d(3, 4, 3))
    assert conv.module.weight.is_contiguous(memory_format=torch.channels_last)
    batch = rt.to_device({"image": torch.randn(2, 3, 8, 8), "label": torch.zeros(2)})
    assert batch["image"].is_contiguous(memory_format=torch.channels_last)
    assert conv(batch["image"]).shape == (2, 4, 6, 6)


def test_wrapper_exposes_the_users_module() -> None:
    rt = td.Runtime(device="cpu")
    net = tiny_mlp()
    net.custom_attribute = "kept"
    model = rt.setup(net)
    assert model.module is net and model.custom_attribute == "kept"
    assert list(model.state_dict()) == list(net.state_dict())  # no wrapper prefixes
    assert len(list(model.parameters())) == len(list(net.parameters()))
    model.load_state_dict(tiny_mlp(seed=7).state_dict())
    assert torch.equal(net[0].weight, tiny_mlp(seed=7)[0].weight)
    with pytest.raises(UserError, match="already set up"):
        rt.setup(model)


def test_returns_model_alone_without_optimizer() -> None:
    rt = td.Runtime(device="cpu")
    model = rt.setup(tiny_mlp())
    assert isinstance(model, nn.Module)
    pair = rt.setup(tiny_mlp(), torch.optim.SGD(tiny_mlp().parameters(), lr=0.1))
    assert isinstance(pair, tuple) and len(pair) == 2
