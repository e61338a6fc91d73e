"""A guest never breaks the party: torchdoctor's hooks survive hostile user hooks, callbacks
that add and remove hooks of their own, gc.collect() and threads; an error of ours becomes a
note and the user's program goes on; hooks are removed only where that is safe."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from tests.capture.check_helpers import check_inprocess
from torchdoctor.capture import guest

CASES = Path(__file__).parent / "cases"


def _opt() -> torch.optim.Optimizer:
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    return torch.optim.SGD([p], lr=0.1)


def test_removing_a_global_hook_inside_the_step_is_deferred() -> None:
    opt = _opt()
    calls = {"ours": 0, "theirs": 0}
    handle = None

    def ours(*_: object) -> None:
        calls["ours"] += 1
        guest.remove_hook(handle)  # from inside optimizer.step's live loop over the hooks

    handle = register_optimizer_step_post_hook(ours)
    theirs = register_optimizer_step_post_hook(
        lambda *_: calls.__setitem__("theirs", calls["theirs"] + 1)
    )
    try:
        opt.step()  # a plain handle.remove() here raises "OrderedDict mutated during iteration"
        opt.step()
        guest.flush_deferred()
        opt.step()
    finally:
        theirs.remove()
    assert calls == {"ours": 1, "theirs": 3}
    from torch.optim.optimizer import _global_optimizer_post_hooks

    assert handle.id not in _global_optimizer_post_hooks


def test_the_torch_behaviour_the_deferral_avoids() -> None:
    opt = _opt()
    handle = None

    def remove_now(*_: object) -> None:
        handle.remove()

    handle = register_optimizer_step_post_hook(remove_now)
    theirs = register_optimizer_step_post_hook(lambda *_: None)
    try:
        with pytest.raises(RuntimeError, match="mutated during iteration"):
            opt.step()
    finally:
        theirs.remove()


@pytest.mark.slow
def test_check_survives_hostile_hooks_gc_and_threads(tmp_path: Path) -> None:
    r = check_inprocess(tmp_path, CASES / "hostile_hooks.py", "30")
    assert r.code == 0, r.stderr
    run = r.run
    assert run["exit"]["status"] == "stopped"
    assert run["steps"]["count"] >= 6 and run["steps"]["source"] == "optimizer"
    assert run["lines"]["rows"], "the sampler ran next to the user's thread"
    assert run["roofline"]["work"]["flops"] > 0
    assert not [n for n in run["notes"] if "mutated" in n]


def test_an_error_of_ours_is_a_note_and_the_training_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchdoctor.capture import clock

    def broken(self: object, source: str) -> None:
        raise ValueError("bookkeeping bug")

    monkeypatch.setattr(clock.StepClock, "tick", broken)
    r = check_inprocess(tmp_path, CASES / "hostile_hooks.py", "8")
    assert r.code == 0, r.stderr
    assert r.run["exit"]["status"] == "completed"  # the script ran to its end
    assert any("optimizer step signal: ValueError: bookkeeping bug" in n for n in r.run["notes"])
    assert "torchdoctor note: optimizer step signal" in r.stdout


@pytest.mark.slow
def test_a_sampler_error_ends_sampling_not_the_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchdoctor.capture import sampler

    def broken(self: object, frame: object) -> None:
        raise RuntimeError("sampler bug")

    monkeypatch.setattr(sampler.StackSampler, "_walk", broken)
    r = check_inprocess(tmp_path, CASES / "hostile_hooks.py", "30")
    assert r.code == 0, r.stderr
    assert r.run["exit"]["status"] == "stopped"
    assert any("stack sampler: RuntimeError: sampler bug" in n for n in r.run["notes"])
