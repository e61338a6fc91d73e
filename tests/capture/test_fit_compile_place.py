"""host-bound's ``model = torch.compile(model)`` told where it goes (``capture/fit.py``'s
``place_compile``): after the statement that last binds the model whose parameters the
for-loop optimizer takes, in the optimizer's function, under the script's own name for it."""

from __future__ import annotations

import textwrap
from pathlib import Path

from torchdoctor.capture.fit import place_compile
from torchdoctor.rules.fixes import host_bound_fix

SCRIPT = textwrap.dedent(
    """\
    import torch
    from torch import nn


    def helper():
        net = None  # another function's name: not the model
        return net


    def main():
        net = nn.Linear(4, 4)
        net = nn.Sequential(net, nn.ReLU())
        net.train()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(2):
            opt.step()
    """
)


def _optimizer(path: Path, first_arg: str = "net.parameters()") -> dict:
    return {
        "impl": "for-loop",
        "class": "SGD",
        "call": {
            "func": "torch.optim.SGD",
            "args": [first_arg],
            "kwargs": {"lr": "0.1"},
            "site": f"{path}:14",
        },
    }


def _fix(path: Path) -> str:
    return (
        host_bound_fix([])
        + f"\ntorch.optim.SGD(net.parameters(), lr=0.1, foreach=True)  # at {path}:14"
    )


def test_the_compile_line_goes_after_the_models_last_binding_under_its_name(
    tmp_path: Path,
) -> None:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    placed = place_compile(_fix(path), [_optimizer(path)])
    first, second = placed.splitlines()
    assert first == (
        f"net = torch.compile(net)  # after the line at {path}:12: fuses chains of small ops "
        "into a few kernels"
    )
    assert second == _fix(path).splitlines()[1]  # the optimizer's own line is left alone


def test_no_place_without_a_model_the_script_binds_by_name(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    fix = _fix(path)
    assert place_compile(fix, [_optimizer(path, "self.model.parameters()")]) == fix
    assert place_compile(fix, [_optimizer(path, "params")]) == fix
    assert place_compile(fix, [_optimizer(path, "other.parameters()")]) == fix  # never bound
    assert place_compile(fix, [_optimizer(tmp_path / "missing.py")]) == fix
    assert place_compile(fix, []) == fix
