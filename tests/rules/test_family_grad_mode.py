"""The grad-mode family (``rules/families/grad_mode.py``): forwards that record an autograd
graph no backward uses, fired from hand-written check records."""

from __future__ import annotations

import pytest

from tests.rules.run_records import experiment, fire, lines, record, row
from torchdoctor.rules.families import grad_mode as gm
from torchdoctor.rules.registry import REGISTRY

(RULE,) = gm.RULES
EVAL = {"site": "/w/eval.py:40", "module": "Net", "calls": 2, "graphs": 2, "reached": 0}


def test_an_evaluation_forward_with_grad_on_is_named_with_its_line() -> None:
    rec = record(
        forwards={"unreached": [EVAL]},
        lines=lines([row("/w/eval.py:40", code="out = net(x)", **{"torch ops": 40.0})]),
    )
    f = fire(RULE, rec)
    assert f is not None and REGISTRY[f.id] is RULE.spec
    # not measured: NO_GRAD_SAVING (15%) of the forward line's 40 ms
    assert f.saving_ms_per_step == pytest.approx(6.0) and f.evidence["estimated"] is True
    assert f.title.startswith("2 forward(s) per step record an autograd graph no backward uses")
    assert "(eval.py:40)" in f.title and f.where == ["/w/eval.py:40"]
    assert f.fix.startswith("with torch.inference_mode():  # at /w/eval.py:40\n    out = net(x)")


def test_measured_without_a_gain_it_stays_for_the_record() -> None:
    exp = experiment("grad-without-backward", 100.0, 98.0)
    f = fire(RULE, record(forwards={"unreached": [EVAL]}, experiments=[exp]))
    assert f is not None and f.severity == "info"
    assert f.saving_ms_per_step == pytest.approx(2.0) and f.evidence["estimated"] is False


def test_every_forward_reached_a_backward_nothing_fires() -> None:
    assert fire(RULE, record(forwards={"unreached": []})) is None
    assert fire(RULE, record(step_ms=0.0, forwards={"unreached": [EVAL]})) is None
