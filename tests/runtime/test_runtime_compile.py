"""The recompile guard: a shape change is reported with the dimension that changed; with
max_recompiles it becomes an error instead of a silent fallback to eager."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchdoctor as td
from torchdoctor.runtime import RecompileError
from torchdoctor.runtime.compile_guard import describe_changes, signature


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.fc(x) * scale


def test_describe_changes_names_argument_and_dimension() -> None:
    old = signature((torch.zeros(8, 16), 2), {"mask": torch.zeros(8, dtype=torch.bool)})
    new = signature((torch.zeros(4, 16), 3), {"mask": torch.zeros(8, dtype=torch.int8)})
    assert describe_changes(old, new, ["x", "k"]) == (
        "x dimension 0: 8 -> 4",
        "k: value 2 -> 3",
        "mask: dtype torch.bool -> torch.int8",
    )
    assert describe_changes(old, old, ["x", "k"]) == ()


def _train(rt: td.Runtime, sizes: list[int]) -> nn.Module:
    model = Net()
    model, opt = rt.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for n in sizes:
        x, y = torch.randn(n, 8), torch.randint(0, 3, (n,))
        rt.backward(F.cross_entropy(model(x), y))
        rt.step(opt)
    return model


@pytest.mark.slow
def test_guard_reports_changed_dimension(caplog: pytest.LogCaptureFixture) -> None:
    torch._dynamo.reset()
    rt = td.Runtime(compile="default", dynamic=False, device="cpu", compile_backend="aot_eager")
    with caplog.at_level(logging.WARNING, logger="torchdoctor.runtime"):
        model = _train(rt, [16, 16, 16, 8, 8])
    guard = model._guard
    assert guard.calls_compiled == 2
    assert [r.changes for r in guard.recompiles] == [("x dimension 0: 16 -> 8",)]
    messages = [r.getMessage() for r in caplog.records if "recompiled" in r.getMessage()]
    assert (
        len(messages) == 1
        and "x dimension 0: 16 -> 8" in messages[0]
        and "mark_dynamic" in messages[0]
    )
    summary = rt.meter.summary()
    assert (
        summary.compile_steps == 2
    )  # the first step and the recompiling one, out of the steady state
    assert summary.compile_time_s > 0


@pytest.mark.slow
def test_max_recompiles_turns_recompile_into_error() -> None:
    torch._dynamo.reset()
    rt = td.Runtime(
        compile="default",
        dynamic=False,
        max_recompiles=1,
        device="cpu",
        compile_backend="aot_eager",
    )
    model = rt.setup(Net())
    with torch.no_grad():
        model(torch.randn(4, 8))
        model(torch.randn(5, 8))  # first recompile: allowed
        with pytest.raises(
            RecompileError, match=r"recompiled 2 times \(max_recompiles=1\).*x dimension 0: 5 -> 6"
        ):
            model(torch.randn(6, 8))


@pytest.mark.slow
def test_inductor_compile_trains_like_eager() -> None:
    # The real default backend, once: compiled training follows the eager trajectory.
    torch._dynamo.reset()
    sizes = [16] * 4
    torch.manual_seed(5)
    eager = _train(td.Runtime(device="cpu"), sizes)
    torch.manual_seed(5)
    compiled = _train(td.Runtime(compile="default", device="cpu"), sizes)
    for a, b in zip(eager.parameters(), compiled.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    assert not torch.equal(eager.module.fc.weight, Net().fc.weight)
    assert compiled._guard.calls_compiled == 1 and not compiled._guard.recompiles
