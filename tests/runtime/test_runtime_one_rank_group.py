"""``strategy="ddp"`` / ``"fsdp"`` over a process group of one rank that the application (or the
GPU check, under ``torchrun --nproc_per_node=1``) created: the wrapper or the DTensor parameters
are really there, the loss falls, and the checkpoint round trip restores the exact state. Gloo on
the CPU here; the GPU check runs the same on NCCL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from torchdoctor.runtime.runtime import Runtime


@pytest.fixture
def one_rank_group(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 1))


def _train(rt: Runtime, model: nn.Module, opt: torch.optim.Optimizer, steps: int) -> list[float]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    y = x[:, :1].sin()
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        rt.backward(loss)
        rt.step(opt)
        losses.append(float(loss.detach()))
    return losses


def test_ddp_runs_over_a_one_rank_group(one_rank_group: None, tmp_path: Path) -> None:
    rt = Runtime(strategy="ddp", precision="fp32", device="cpu")
    assert rt.strategy.name == "ddp" and rt.dist.backend == "gloo" and rt.world_size == 1
    model = rt.setup(_model())
    opt = rt.setup_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    assert isinstance(model._forward_module, nn.parallel.DistributedDataParallel)
    losses = _train(rt, model, opt, 8)
    assert losses[-1] < losses[0]
    path = rt.save_checkpoint(tmp_path / "ckpt.pt", model, opt)
    fresh = Runtime(strategy="ddp", precision="fp32", device="cpu")
    again = fresh.setup(nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 1)))
    fresh.load_checkpoint(path, again)
    for a, b in zip(model.module.parameters(), again.module.parameters(), strict=True):
        assert torch.equal(a, b)
    rt.close()  # the application's group stays up: the runtime did not create it
    assert dist.is_initialized()


def test_fsdp_runs_over_a_one_rank_group(one_rank_group: None, tmp_path: Path) -> None:
    from torch.distributed.tensor import DTensor

    rt = Runtime(strategy="fsdp", precision="fp32", device="cpu")
    assert rt.strategy.name == "fsdp"
    model = rt.setup(_model())
    assert all(isinstance(p, DTensor) for p in model.parameters())
    opt = rt.setup_optimizer(torch.optim.AdamW(model.parameters(), lr=1e-2))
    losses = _train(rt, model, opt, 8)
    assert losses[-1] < losses[0]
    path = rt.save_checkpoint(tmp_path / "ckpt.pt", model, opt)
    saved = {k: v.clone() for k, v in rt.strategy.state_dict(model.module).items()}
    _train(rt, model, opt, 2)  # move away from the checkpoint, then load it back
    rt.load_checkpoint(path, model, opt)
    for k, v in rt.strategy.state_dict(model.module).items():
        assert torch.equal(v, saved[k]), k


def test_auto_stays_single_on_one_rank(one_rank_group: None) -> None:
    assert Runtime(precision="fp32", device="cpu").strategy.name == "single"


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_the_gpu_checks_dist_collectors_on_gloo(
    one_rank_group: None, tmp_path: Path, strategy: str
) -> None:
    # The same code the GPU check runs under torchrun on NCCL; here only "NCCL" can fail.
    import importlib
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    paths = importlib.import_module("gpu_check_paths")
    collect = paths.collect_ddp if strategy == "ddp" else paths.collect_fsdp
    evidence = collect(tmp_path, width=32)
    out = paths.judge.JUDGES[strategy](evidence)
    failed = [name for name, ok in out["checks"].items() if not ok]
    assert failed == ["NCCL, one rank"], out
