"""The watcher's baseline of ordinary steps (``capture/monitor.py``): where the script is in
steps that do not run long, by its whole user call chain, so that a long step is told apart
as the loop's own work slowed down or as other work (an evaluation through the same model).
A real thread parked at known lines is sampled; the step clock is a stand-in."""

from __future__ import annotations

import sys
import threading
from array import array
from collections.abc import Callable, Iterator
from time import perf_counter
from types import SimpleNamespace
from typing import Any

import pytest

from torchdoctor.capture import clock as clock_mod
from torchdoctor.capture.clock import StepClock, StopScript
from torchdoctor.capture.monitor import Monitor
from torchdoctor.capture.options import CheckOptions


def _layer(ev: threading.Event) -> None:
    ev.wait(10)  # the model's innermost line, the same in training and evaluation


def _model(ev: threading.Event) -> None:
    _layer(ev)


def _train_step(ev: threading.Event) -> None:
    _model(ev)


def _evaluate(ev: threading.Event) -> None:
    _model(ev)


def _loop(step: Callable[[threading.Event], None], ev: threading.Event) -> None:
    step(ev)


@pytest.fixture
def parked() -> Iterator[Callable[[Callable[[threading.Event], None]], int]]:
    """Start a thread parked inside ``_loop(step)``; returns its ident."""
    events: list[threading.Event] = []
    threads: list[threading.Thread] = []

    def start(step: Callable[[threading.Event], None]) -> int:
        ev = threading.Event()
        t = threading.Thread(target=_loop, args=(step, ev), daemon=True)
        t.start()
        events.append(ev)
        threads.append(t)
        for _ in range(1000):  # until it sits in the wait
            frames = sys._current_frames()
            f = frames.get(t.ident or 0)
            if f is not None and any(fr.f_code is _layer.__code__ for fr in _walk(f)):
                break
            threading.Event().wait(0.001)
        assert t.ident is not None
        return t.ident

    yield start
    for ev in events:
        ev.set()
    for t in threads:
        t.join(5)


def _walk(frame: Any) -> Iterator[Any]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _monitor(ident: int) -> tuple[Monitor, Any]:
    """Five 10 ms steps done; the sixth has just started."""
    clock = SimpleNamespace(
        steps=5,
        source="optimizer",
        step_s=array("d", [0.010] * 5),
        data_wait_s=array("d", [0.0] * 5),
        core_wait_s=array("d", [0.0] * 5),
        run_s=array("d", [0.010] * 5),
        _pending_wait=0.0,
        _step_start=perf_counter(),
        core_wait_so_far_s=lambda: 0.0,
        bookkeeping=False,
    )
    profiler = SimpleNamespace(rss_at_start=None, recording=False)
    mon = Monitor(SimpleNamespace(clock=clock, profiler=profiler))
    mon.main_ident = ident
    return mon, clock


def _end_step(clock: Any, ms: float) -> None:
    clock.step_s.append(ms / 1e3)
    clock.data_wait_s.append(0.0)
    clock.core_wait_s.append(0.0)
    clock.run_s.append(ms / 1e3)
    clock.steps += 1
    clock._step_start = perf_counter()


def _run_long(mon: Monitor, clock: Any, looks: int = 3) -> None:
    clock._step_start = perf_counter() - 0.080  # 80 ms into a loop of 10 ms steps
    for _ in range(looks):
        mon._tick()


def test_an_evaluation_through_the_same_model_is_told_by_its_chain(parked: Any) -> None:
    """Ordinary steps sampled in the training step; a long step in an evaluation that calls the
    same model: the trimmed stack (innermost two frames and the outermost) reads the same, the
    recorded chain does not. A long training step's chain is one the ordinary steps ran."""
    train = parked(_train_step)
    mon, clock = _monitor(train)
    for _ in range(3):  # steps 6, 7, 8: ordinary (10 ms), each looked at twice
        mon._tick()
        mon._tick()
        _end_step(clock, 10.0)
    mon._tick()  # step 9 under way: step 8's samples join the baseline
    assert mon.ordinary_steps == 3
    mon.main_ident = parked(_evaluate)
    _run_long(mon, clock)  # step 9 runs long in the evaluation
    _end_step(clock, 90.0)
    mon.main_ident = train
    _run_long(mon, clock)  # step 10 runs long in the training step
    rec = mon.record()
    (evaluation,) = rec.long_step_samples["9"]
    (training,) = rec.long_step_samples["10"]
    assert evaluation["stack"] == training["stack"]  # what the report prints: alike
    assert evaluation["stack"][0].endswith(f"in {_layer.__name__}")
    assert evaluation["chain"] not in rec.ordinary_chains
    assert training["chain"] in rec.ordinary_chains
    assert rec.ordinary_steps == 3 and sum(rec.ordinary_chains.values()) == 6


def test_a_step_that_ended_long_between_two_looks_is_not_a_baseline(parked: Any) -> None:
    """A step looked at early (not yet long) that ends at 9x the median was never sampled as
    long: its samples are not the loop's ordinary lines. One under twice the median is."""
    mon, clock = _monitor(parked(_evaluate))
    mon._tick()
    _end_step(clock, 90.0)
    mon._tick()
    assert mon.ordinary_steps == 0 and not mon.ordinary
    _end_step(clock, 15.0)
    mon._tick()
    assert mon.ordinary_steps == 1 and sum(mon.ordinary.values()) == 1


def test_no_step_is_sampled_during_our_bookkeeping(parked: Any) -> None:
    """Between two steps the clock does work of its own (a probe ends, the profiler starts):
    the step the watcher would count is not under way; nothing is sampled then."""
    mon, clock = _monitor(parked(_train_step))
    clock.bookkeeping = True
    _run_long(mon, clock)
    assert mon.samples == {} and mon._pending == (0, [])
    clock.bookkeeping = False
    _run_long(mon, clock)
    assert list(mon.samples) == [6]


class _Listener:
    """Notes whether the clock said it was in its bookkeeping when each call came."""

    def __init__(self, clock: list[StepClock]) -> None:
        self.clock = clock
        self.seen: list[tuple[str, bool]] = []

    def window_start(self, warmup: int) -> None:
        self.seen.append(("window_start", self.clock[0].bookkeeping))

    def window_end(self) -> None:
        self.seen.append(("window_end", self.clock[0].bookkeeping))

    def experiments_begin(self) -> bool:
        self.seen.append(("experiments_begin", self.clock[0].bookkeeping))
        return False


def test_the_clock_says_when_its_own_work_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The profiler's start and end run with ``bookkeeping`` set; the steps do not, nor does
    anything after the script is told to stop."""
    monkeypatch.setattr(clock_mod, "StepWait", lambda: None)
    holder: list[StepClock] = []
    listener = _Listener(holder)
    opts = CheckOptions(warmup_steps=2, profile_steps=2, clean_steps=0)
    clock = StepClock(opts, listener)
    holder.append(clock)
    clock.begin()
    with pytest.raises(StopScript):
        for _ in range(40):
            clock.tick("optimizer")
            assert clock.bookkeeping is False
    assert clock.bookkeeping is False
    assert ("window_start", True) in listener.seen and ("window_end", True) in listener.seen
    assert all(flag for _, flag in listener.seen)


def test_no_ordinary_step_is_looked_at_while_the_profiler_records(parked: Any) -> None:
    """The profiled window, where the findings come from, sees the watcher as before: a look
    only in a step already long."""
    mon, clock = _monitor(parked(_train_step))
    mon.session.profiler.recording = True
    mon._tick()
    assert mon._pending == (0, [])
    _run_long(mon, clock)
    assert list(mon.samples) == [6]
    mon.session.profiler.recording = False
    _end_step(clock, 10.0)
    mon._tick()
    assert mon._pending[0] == 7 and len(mon._pending[1]) == 1
