"""host-bound's ``model = torch.compile(model)`` told where it goes (``capture/fit.py``'s
``place_compile``): after the statement that last binds the model whose parameters the
for-loop optimizer takes, in the optimizer's function, under the script's own name for it."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

from torchdoctor.capture.fit import fit_to_run, place_compile
from torchdoctor.record.rows import Optimizer
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.fixes import host_bound_fix
from torchdoctor.rules.registry import spec

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


def _optimizer(path: Path, first_arg: str = "net.parameters()") -> Optimizer:
    return Optimizer.from_dict(
        {
            "impl": "for-loop",
            "class": "SGD",
            "call": {
                "func": "torch.optim.SGD",
                "args": [first_arg],
                "kwargs": {"lr": "0.1"},
                "site": f"{path}:14",
            },
        }
    )


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


def _host_bound(path: Path) -> Finding:
    s = spec("host-bound")
    return Finding(
        "host-bound", "Host-bound: ...", "warning", 5.0, 0.5, {}, _fix(path), s.explanation,
        s.doc_url, where=[],
    )  # fmt: skip


def test_check_places_the_line_unless_the_script_compiles_already(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    record = {"script": str(path), "config": {"optimizers": [_optimizer(path).to_dict()]}}
    (f,) = fit_to_run([_host_bound(path)], record)
    assert f.fix.startswith(f"net = torch.compile(net)  # after the line at {path}:12")
    # a script that compiles already: a compile line is never placed after its own
    record["compile"] = {"compiles": 1, "compile_calls": [{"mode": None}]}
    named = _host_bound(path)
    named = dataclasses.replace(named, fix=named.fix.replace("model", "net"))
    (f,) = fit_to_run([named], record)
    assert "after the line at" not in f.fix
