"""The repeated-work family (``rules/families/repeated_work.py``): construction repeated inside
the step, and a module stepped over slices in a Python loop, from hand-written check records."""

from __future__ import annotations

import pytest

from tests.rules.run_records import fire, lines, record, row
from torchdoctor.rules.families import repeated_work as rw

CONSTRUCTION, LOOP = rw.RULES


def adam(calls: int = 5, seconds: float = 0.02) -> dict:
    return {"kind": "optimizer", "site": "/w/t.py:20", "what": "Adam", "calls": calls,
            "seconds": seconds}  # fmt: skip


def test_an_optimizer_rebuilt_every_step_costs_its_construction_and_its_state() -> None:
    rec = record(repeats=[adam()], ops={"optimizer_state_init_ms_per_step": 3.0})
    f = fire(CONSTRUCTION, rec)
    assert f is not None and f.id == "repeated-construction"
    # 20 ms over 5 measured steps = 4 ms, plus the state's 3 ms re-created every step
    assert f.saving_ms_per_step == pytest.approx(7.0)
    assert f.title == (
        "Adam (optimizer) built 1.0x per step inside the loop at t.py:20; its step() "
        "re-creates the optimizer's state: 3.0 ms per step"
    )
    assert f.evidence["construction_ms_per_step"] == 4.0
    assert f.evidence["state_init_ms_per_step"] == 3.0
    assert f.severity == "warning"  # the spec's floor: 7% of the step
    # no source line recorded: advice in words, no template code
    assert f.fix.startswith("# build the Adam once, before the loop")


def test_without_the_state_the_specs_own_title() -> None:
    f = fire(CONSTRUCTION, record(repeats=[adam()]))
    assert f is not None and f.saving_ms_per_step == pytest.approx(4.0)
    assert f.title == "Adam (optimizer) built 1.0x per step inside the loop at t.py:20"
    assert "state_init_ms_per_step" not in f.evidence


def test_construction_once_in_a_while_is_not_inside_the_loop() -> None:
    assert fire(CONSTRUCTION, record(repeats=[adam(calls=2)])) is None  # 0.4 per step
    assert fire(CONSTRUCTION, record(repeats=[adam(calls=3)])) is not None  # 0.6: the spec's half
    # an iterator started 3 times in 5 steps is an epoch loop over a short epoch, though it
    # reaches the spec's half: iterators must start nearly every step (ITER_PER_STEP)
    it = {"kind": "dataloader iterator", "site": "t.py:9", "what": "iter", "calls": 3}
    assert fire(CONSTRUCTION, record(repeats=[it])) is None
    assert fire(CONSTRUCTION, record(repeats=[{**it, "calls": 5}])) is not None


def test_a_cell_stepped_over_time_steps_in_training() -> None:
    loop = {"site": "/w/m.py:30", "module": "LSTMCell", "calls": 32, "grad_calls": 32,
            "sliced": True, "cell": True}  # fmt: skip
    rec = record(
        forwards={"loops": [loop]}, lines=lines([row("/w/m.py:30", **{"torch ops": 10.0})])
    )
    f = fire(LOOP, rec)
    assert f is not None and f.id == "module-call-loop"
    # training: LOOP_SAVING (1.5x) the loop line's 10 ms forward
    assert f.saving_ms_per_step == pytest.approx(15.0) and f.evidence["training"] is True
    assert f.title == (
        "LSTMCell called 32 times per step at m.py:30, each on a slice of a larger tensor: "
        "a Python loop over time steps"
    )
    assert f.fix.startswith("# replace the nn.LSTMCell stepped over the sequence at m.py:30 by one")
    assert all(ln.startswith("#") for ln in f.fix.splitlines())  # sizes unknown: no code
    # without autograd a third of that
    no_grad = record(
        forwards={"loops": [{**loop, "grad_calls": 0}]},
        lines=lines([row("/w/m.py:30", **{"torch ops": 10.0})]),
    )
    g = fire(LOOP, no_grad)
    assert g is not None and g.saving_ms_per_step == pytest.approx(5.0)


def test_a_loop_on_whole_tensors_is_not_a_slice_loop() -> None:
    loop = {"site": "m.py:30", "module": "Block", "calls": 12, "grad_calls": 12}
    assert fire(LOOP, record(forwards={"loops": [loop]})) is None
