"""optimizer_impl: a fresh optimizer is rebuilt with the same groups; otherwise the runtime says why not."""

from __future__ import annotations

import torch
from runtime_helpers import tiny_mlp

import torchdoctor as td
from torchdoctor.runtime.optim import apply_optimizer_impl


def _groups(model: torch.nn.Module) -> list[dict[str, object]]:
    params = list(model.parameters())
    return [
        {"params": params[:2], "lr": 0.1},
        {"params": params[2:], "lr": 0.01, "weight_decay": 0.0},
    ]


def test_fresh_adamw_becomes_fused_with_same_groups() -> None:
    model = tiny_mlp()
    opt = torch.optim.AdamW(_groups(model), lr=1e-3, weight_decay=0.05)
    rt = td.Runtime(optimizer_impl="fused", device="cpu")
    _, new = rt.setup(model, opt)
    assert new is not opt and type(new) is torch.optim.AdamW
    assert [g["fused"] for g in new.param_groups] == [True, True]
    assert [g["lr"] for g in new.param_groups] == [0.1, 0.01]
    assert [g["weight_decay"] for g in new.param_groups] == [0.05, 0.0]
    assert [p for g in new.param_groups for p in g["params"]] == list(model.parameters())
    assert "rebuilt with fused=True" in rt.config_dict()["optimizer_note"]


def test_foreach_on_sgd() -> None:
    model = tiny_mlp()
    new, note = apply_optimizer_impl(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), "foreach"
    )
    assert new.param_groups[0]["foreach"] is True and new.param_groups[0]["momentum"] == 0.9
    assert note and "foreach=True" in note


def test_optimizer_with_state_is_left_alone() -> None:
    model = tiny_mlp()
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    new, note = apply_optimizer_impl(opt, "fused")
    assert new is opt and note and "already has state" in note


def test_optimizer_without_the_flag_is_left_alone() -> None:
    opt = torch.optim.LBFGS(tiny_mlp().parameters())
    new, note = apply_optimizer_impl(opt, "fused")
    assert new is opt and note and "has no fused implementation" in note


def test_default_keeps_the_object() -> None:
    opt = torch.optim.AdamW(tiny_mlp().parameters())
    assert apply_optimizer_impl(opt, "default") == (opt, None)
