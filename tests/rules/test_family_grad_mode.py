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
    assert f.title.endswith(
        " (estimated at 15% of their time; not measured: no extra steps ran: --full, torchrun, "
        "or the script ended first)"
    )
    assert f.fix.startswith("with torch.inference_mode():  # at /w/eval.py:40\n    out = net(x)")


def test_measured_without_a_gain_it_stays_for_the_record() -> None:
    exp = experiment("grad-without-backward", 100.0, 98.0)
    f = fire(RULE, record(forwards={"unreached": [EVAL]}, experiments=[exp]))
    assert f is not None and f.severity == "info"
    assert f.saving_ms_per_step == pytest.approx(2.0) and f.evidence["estimated"] is False
    # the title says why a measured saving is info
    assert f.title.endswith(
        "2% of the step, under the 5% that counts as a gain: within this run's noise (info)"
    )


def test_a_gain_is_judged_as_a_modes_on_its_pairs() -> None:
    """eval_with_grad.py's wall-clock pairs at load 20 (1.13, 0.93, 0.90, 1.05; medians 250.8
    against 244.3 ms): no gain, info. The same pairs net of each step's wait for a core
    (0.78-0.81) are a gain; a typical pair 28% faster with two of four net pairs slower is
    not (its interval holds 1), though its saving passes ``TOGGLE_GAIN``."""
    noisy = experiment("grad-without-backward", 250.8, 244.3, pairs=[1.13, 0.93, 0.90, 1.05])
    f = fire(RULE, record(forwards={"unreached": [EVAL]}, experiments=[noisy]))
    assert f is not None and f.severity == "info"
    net = {**noisy, "net_pair_ratios": [0.78, 0.80, 0.79, 0.81]}
    f = fire(RULE, record(forwards={"unreached": [EVAL]}, experiments=[net]))
    assert f is not None and f.severity != "info" and "noise" not in f.title
    split = {**noisy, "net_pair_ratios": [0.5, 0.5, 1.02, 1.05]}
    f = fire(RULE, record(forwards={"unreached": [EVAL]}, experiments=[split]))
    assert f is not None and f.severity == "info" and f.saving_ms_per_step > 0.05 * 100.0


def test_every_forward_reached_a_backward_nothing_fires() -> None:
    assert fire(RULE, record(forwards={"unreached": []})) is None
    assert fire(RULE, record(step_ms=0.0, forwards={"unreached": [EVAL]})) is None
