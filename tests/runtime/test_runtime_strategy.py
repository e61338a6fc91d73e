"""Strategy and precision objects: which strategy a process layout gets, FSDP2's per-block
wrapping and mixed-precision policy (in a one-process gloo group, so no torchrun is needed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from torchdoctor.errors import UserError
from torchdoctor.runtime.distributed import DistInfo
from torchdoctor.runtime.precision import PrecisionPlugin
from torchdoctor.runtime.strategy import (
    DDP,
    FSDP2,
    SingleDevice,
    block_policy,
    classes_policy,
    select_strategy,
)

CPU = torch.device("cpu")
ONE = DistInfo(rank=0, local_rank=0, world_size=1, local_world_size=1)
TWO = DistInfo(rank=0, local_rank=0, world_size=2, local_world_size=2, backend="gloo")


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.Linear(4, 4)
        self.mlp = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.relu(self.attn(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _plugin(precision: str) -> PrecisionPlugin:
    return PrecisionPlugin.choose(precision, CPU)


@pytest.mark.parametrize(
    ("requested", "info", "expected"),
    [
        ("auto", ONE, SingleDevice),
        ("fsdp", ONE, SingleDevice),  # a laptop run of a sharded script still trains
        ("auto", TWO, DDP),
        ("ddp", TWO, DDP),
        ("fsdp", TWO, FSDP2),
    ],
)
def test_strategy_for_each_layout(requested: str, info: DistInfo, expected: type) -> None:
    strategy, why = select_strategy(requested, info, CPU, _plugin("fp32"))
    assert type(strategy) is expected and why


def test_single_under_torchrun_and_unknown_names_are_errors() -> None:
    with pytest.raises(UserError, match="unsynchronised replicas"):
        select_strategy("single", TWO, CPU, _plugin("fp32"))
    with pytest.raises(UserError, match="strategy must be one of"):
        select_strategy("zero3", TWO, CPU, _plugin("fp32"))


def test_block_policy_picks_module_list_entries_else_top_level_children() -> None:
    net = Net()
    chosen = [n for n, m in net.named_modules() if block_policy(net)(m)]
    assert chosen == ["layers.0", "layers.1"]
    flat = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    assert [n for n, m in flat.named_modules() if block_policy(flat)(m)] == ["0", "2"]
    assert [n for n, m in net.named_modules() if classes_policy([nn.Linear])(m)] == [
        "embed",
        "layers.0.attn",
        "layers.0.mlp",
        "layers.1.attn",
        "layers.1.mlp",
        "head",
    ]


def test_mixed_precision_policy_follows_the_precision() -> None:
    assert _plugin("fp32").fsdp_mp_policy() is None
    mp = _plugin("bf16-mixed").fsdp_mp_policy()
    assert (mp.param_dtype, mp.reduce_dtype) == (torch.bfloat16, torch.float32)


@pytest.fixture
def one_process_group(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_fsdp2_units_and_bf16_compute(one_process_group: None) -> None:
    strategy = FSDP2(_plugin("bf16-mixed"), wrap_policy=[Block])
    net = strategy.setup_module(Net())
    assert strategy.units == ["layers.0", "layers.1"]
    out = net(torch.randn(3, 4))
    # The policy casts parameters to bf16 for compute; the sharded fp32 originals stay.
    assert out.dtype == torch.bfloat16
    assert {p.dtype for p in net.parameters()} == {torch.float32}
    out.float().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in net.parameters())
    described = strategy.describe()
    assert described["fsdp_units"] == 2 and described["fsdp_param_dtype"] == "torch.bfloat16"


def test_fsdp2_no_sync_flag_reaches_the_root(one_process_group: None) -> None:
    strategy = FSDP2(_plugin("fp32"))
    net = strategy.setup_module(Net())
    strategy.set_grad_sync(False)
    assert net._get_fsdp_state()._fsdp_param_group.reduce_grads is False  # type: ignore[operator]
    strategy.set_grad_sync(True)
    assert net._get_fsdp_state()._fsdp_param_group.reduce_grads is True  # type: ignore[operator]


def test_runtime_rejects_an_optimizer_built_before_fsdp_sharding(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import torchdoctor.runtime.runtime as rt_mod

    monkeypatch.setattr(rt_mod, "select_strategy", lambda *a, **k: (FSDP2(_plugin("fp32")), "test"))
    rt = rt_mod.Runtime(strategy="fsdp", precision="fp32", device="cpu")
    net = Net()
    with pytest.raises(UserError, match="create the optimizer after setup"):
        rt.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
