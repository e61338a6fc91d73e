"""The forward watch counts one module called many times from one line on slices of a larger
tensor (a model over the samples of a batch, an RNN cell over time steps), and the
``module-call-loop`` rule names it; a loop over fresh tensors (decoding) is not a slice loop."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchdoctor.capture.forward_watch import LOOP_CALLS, ForwardWatch
from torchdoctor.code_paths import CodePaths
from torchdoctor.record.account import ModuleLoop
from torchdoctor.rules.run_rules import run_findings


def watched(fn) -> tuple[ModuleLoop, ...]:  # type: ignore[no-untyped-def]
    w = ForwardWatch(CodePaths())
    w.begin()
    try:
        with torch.no_grad():
            fn()
    finally:
        w.end()
    return w.loops()


def test_per_sample_calls_over_two_tensors_are_a_slice_loop() -> None:
    enc = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 4))
    a, b = torch.randn(16, 8), torch.randn(16, 8)

    def pair() -> None:
        for x in (a, b):
            torch.stack([enc(x[i]) for i in range(len(x))])

    loops = watched(pair)
    top = loops[0]
    assert top.module == "Sequential" and top.calls == 32 and top.sliced
    assert not top.cell and top.grad_calls == 0
    assert top.site.endswith(f"{__file__.rsplit('/', 1)[-1]}:{pair.__code__.co_firstlineno + 2}")


def test_cell_loop_and_fresh_tensors() -> None:
    cell = nn.LSTMCell(4, 8)
    x = torch.randn(2, 12, 4)
    dec = nn.Linear(4, 4)

    def steps() -> None:
        h = (torch.zeros(2, 8), torch.zeros(2, 8))
        for i in range(x.shape[1]):
            h = cell(x[:, i], h)
        y = torch.randn(2, 4)
        for _ in range(LOOP_CALLS + 2):
            y = dec(y)  # each input is the last output: no slice of one tensor

    by_module = {r.module: r for r in watched(steps)}
    assert by_module["LSTMCell"].cell and by_module["LSTMCell"].calls == 12
    assert by_module["LSTMCell"].sliced
    assert not by_module["Linear"].sliced


def record(loops: list[dict], forward_ms: float) -> dict:  # type: ignore[type-arg]
    site = str(loops[0]["site"]) if loops else "t.py:21"
    row = {
        "site": site,
        "function": "embed",
        "code": "x",
        "self_ms": forward_ms,
        "inclusive_ms": forward_ms,
        "under": {"torch ops": forward_ms},
        "ops": [],
    }
    return {
        "steps": {"mean_step_ms": 100.0, "median_step_ms": 100.0, "measured_steps": 5},
        "forwards": {"loops": loops},
        "lines": {"rows": [row], "categories": {"torch ops": forward_ms}},
    }


def loop(**kw: object) -> dict:  # type: ignore[type-arg]
    base = {"site": "t.py:21", "module": "Sequential", "cell": False, "calls": 128}
    return {**base, "grad_calls": 128, "sliced": True, **kw}


def test_module_call_loop_rule() -> None:
    (f,) = [f for f in run_findings(record([loop()], 20.0)) if f.id == "module-call-loop"]
    assert f.saving_ms_per_step == pytest.approx(30.0)  # 1.5x the loop line's 20 ms forward
    assert f.where == ["t.py:21"] and "128 times" in f.title and "whole batch" in f.fix
    (f,) = [
        f
        for f in run_findings(record([loop(module="LSTMCell", cell=True, grad_calls=0)], 30.0))
        if f.id == "module-call-loop"
    ]
    assert f.saving_ms_per_step == pytest.approx(15.0)  # no autograd: 0.5x
    assert "nn.LSTM(" in f.fix and "time steps" in f.title
    quiet = record([loop(sliced=False)], 20.0)
    assert "module-call-loop" not in [f.id for f in run_findings(quiet)]
