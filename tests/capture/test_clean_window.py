"""The clean window: steps timed by their boundaries alone before any instrument starts, the
same again after the instruments, and the CUDA-event clock with its host lead (a fake CUDA)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from torchdoctor.capture.clock import StepClock, StopScript
from torchdoctor.capture.options import CheckOptions, Schedule
from torchdoctor.capture.timed_window import TimedWindow


class Recorder:
    """Every listener call, in order, with the step count at the time."""

    def __init__(self, clock_ref: list[StepClock]) -> None:
        self.events: list[tuple[str, object, int]] = []
        self._clock = clock_ref

    def _log(self, name: str, arg: object = None) -> None:
        self.events.append((name, arg, self._clock[0].steps if self._clock else -1))

    def window_start(self, warmup: int) -> None:
        self._log("start", warmup)

    def window_step(self) -> None:
        self._log("step")

    def window_end(self) -> None:
        self._log("end")

    def set_measuring(self, on: bool) -> None:
        self._log("measuring", on)

    def enter(self, window: str) -> None:
        self._log("enter", window)

    def leave(self, window: str) -> None:
        self._log("leave", window)

    def timed_step(self, name: str, host_end_s: float) -> None:
        self._log("timed_step", name)

    def timed_abort(self) -> None:
        self._log("timed_abort")


def _run(options: CheckOptions, source: str = "optimizer", n: int = 100) -> Recorder:
    ref: list[StepClock] = []
    rec = Recorder(ref)
    clock = StepClock(options, rec)
    ref.append(clock)
    clock.begin()
    for _ in range(n):
        try:
            clock.tick(source)
        except StopScript:
            rec._log("STOP")
            break
    return rec


def _steps_of(rec: Recorder, name: str, arg: object = None) -> list[int]:
    return [n for e, a, n in rec.events if e == name and (arg is None or a == arg)]


@pytest.mark.parametrize(("w", "c", "p"), [(5, 8, 5), (3, 8, 3), (0, 8, 2), (1, 3, 1), (2, 9, 4)])
def test_no_instrument_touches_a_clean_step(w: int, c: int, p: int) -> None:
    rec = _run(CheckOptions(warmup_steps=w, clean_steps=c, profile_steps=p))
    clean = _steps_of(rec, "timed_step", "clean")
    # the clean steps are exactly the c steps after the warm-up, each recorded once
    assert clean == list(range(w + 1, w + c + 1))
    first_clean, last_clean = clean[0], clean[-1]
    # nothing is armed before the clean window ends: the profiler starts at its last boundary,
    # the probe step (work count) ends before its first step begins
    assert _steps_of(rec, "start") == [last_clean]
    assert all(n < first_clean for n in _steps_of(rec, "leave", "probe"))
    assert _steps_of(rec, "measuring", True) == [last_clean + 1]  # after the profiler's own step
    profiled = _steps_of(rec, "step")
    assert profiled[0] == last_clean + 1 and len(profiled) == p + 1
    # after the window: the same clean timing again, then the script is stopped
    after = _steps_of(rec, "timed_step", "after")
    assert after == list(range(profiled[-1] + 1, profiled[-1] + 1 + min(5, c)))
    assert [e for e, _, _ in rec.events][-1] == "STOP"
    timed_ends = [n for e, a, n in rec.events if e == "leave" and a in ("clean", "after")]
    assert timed_ends == [last_clean, after[-1]]


def test_schedule_without_clean_steps_is_the_old_one() -> None:
    s = Schedule.of(3, 0, 2)
    assert (s.clean, s.after, s.lead, s.last_profiled, s.probe_step) == (None, None, 3, 5, 2)
    rec = _run(CheckOptions(warmup_steps=3, clean_steps=0, profile_steps=2))
    assert [a for e, a, _ in rec.events if e == "enter"] == ["probe"]  # no timed window
    assert _steps_of(rec, "start") == [2] and _steps_of(rec, "measuring", True) == [3]


def test_full_runs_the_after_window_and_keeps_going() -> None:
    rec = _run(CheckOptions(warmup_steps=2, clean_steps=4, profile_steps=1, full=True), n=40)
    assert len(_steps_of(rec, "timed_step", "after")) == 4
    assert "STOP" not in [e for e, _, _ in rec.events]


def test_a_stronger_signal_discards_the_timed_windows() -> None:
    ref: list[StepClock] = []
    rec = Recorder(ref)
    clock = StepClock(CheckOptions(warmup_steps=2, clean_steps=4, profile_steps=2), rec)
    ref.append(clock)
    clock.begin()
    for _ in range(4):
        clock.tick("dataloader")
    assert _steps_of(rec, "timed_step", "clean")
    clock.tick("optimizer")
    assert "timed_abort" in [e for e, _, _ in rec.events]


def test_clean_steps_are_validated() -> None:
    from torchdoctor.errors import UserError

    with pytest.raises(UserError, match="clean-steps"):
        CheckOptions(clean_steps=-1)


class FakeEvent:
    """A CUDA event whose completion time (ms on the GPU's clock) the test sets."""

    clock: ClassVar[list[float]] = []

    def __init__(self, enable_timing: bool = False) -> None:
        self.t: float | None = None

    def record(self) -> None:
        self.t = FakeEvent.clock.pop(0)

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, other: FakeEvent) -> float:
        assert self.t is not None and other.t is not None
        return other.t - self.t


class FakeCuda:
    Event = FakeEvent
    syncs = 0

    def synchronize(self) -> None:
        FakeCuda.syncs += 1


def test_cuda_events_give_gpu_steps_and_host_lead(monkeypatch: pytest.MonkeyPatch) -> None:
    import torchdoctor.capture.timed_window as tw

    host = iter([100.0, 100.010, 100.020, 100.030])  # seconds: the reference, then 3 step ends
    monkeypatch.setattr(tw, "perf_counter", lambda: next(host))
    # GPU clock (ms): the reference at 0, then the GPU finishes each step 25 ms apart, trailing
    FakeEvent.clock = [0.0, 25.0, 50.0, 75.0]
    w = TimedWindow("clean", 6, FakeCuda())
    w.start()
    syncs = FakeCuda.syncs
    for _ in range(3):
        w.step(next(host))
    assert FakeCuda.syncs == syncs  # no synchronisation inside the window
    t = w.finish([0.010, 0.010, 0.010])
    assert t.clock == "cuda-events"
    assert t.step_ms == pytest.approx((25.0, 25.0, 25.0))
    assert t.host_step_ms == pytest.approx((10.0, 10.0, 10.0))
    # GPU end (0.025 s after the reference) minus host end (0.010 s): 15 ms, then 30, 45
    assert t.host_lead_ms == pytest.approx((15.0, 30.0, 45.0))
    d = t.to_dict()
    assert d["median_ms"] == pytest.approx(25.0) and d["host_lead_median_ms"] == pytest.approx(30)


def test_a_cpu_window_is_the_host_clock() -> None:
    w = TimedWindow("clean", 1, None)
    w.start()
    w.step(1.0)
    t = w.finish([0.004, 0.006, 0.005])
    assert t.clock == "host" and t.step_ms == pytest.approx((4.0, 6.0, 5.0))
    assert t.to_dict()["median_ms"] == pytest.approx(5.0)


def test_unreadable_events_fall_back_to_the_host_clock() -> None:
    class Broken(FakeEvent):
        def synchronize(self) -> None:
            raise RuntimeError("device lost")

    class BrokenCuda(FakeCuda):
        Event = Broken

    FakeEvent.clock = [0.0, 5.0]
    w = TimedWindow("clean", 1, BrokenCuda())
    w.start()
    w.step(0.0)
    t = w.finish([0.003])
    assert t.clock == "host" and t.error and "device lost" in t.error


@pytest.mark.parametrize("requested", [1, 3, 5])
@pytest.mark.parametrize("seen", range(1, 30))
def test_suggested_options_fit_a_short_script(seen: int, requested: int) -> None:
    from torchdoctor.capture.measurement import suggested_options

    words = suggested_options(seen, requested, clean=8).split()
    opts = dict(zip(words[::2], (int(v) for v in words[1::2]), strict=True))
    sched = Schedule.of(
        opts["--warmup"], opts.get("--clean-steps", 8), opts.get("--steps", requested)
    )
    assert sched.last_profiled <= seen  # the profiled window fits the steps the script has
    if sched.clean is not None:
        assert sched.clean[1] - sched.clean[0] + 1 >= 3  # a clean window worth a median
    if seen >= 6 + requested:  # room for warm-up, 3 clean, the profiler's step: keep them
        assert sched.clean is not None and opts.get("--steps", requested) == requested


def _child_clock(monkeypatch: pytest.MonkeyPatch, cuda: object) -> tuple[StepClock, Any]:
    import torchdoctor.capture.timed_window as tw

    monkeypatch.setattr(tw, "script_cuda", lambda: cuda)

    timed = tw.StepEvents()
    # a child's schedule: no clean window, no profiler; its "profiled" steps are the measured
    clock = StepClock(CheckOptions(warmup_steps=3, clean_steps=0, profile_steps=4), timed)
    timed.clock = clock
    clock.begin()
    return clock, timed


def test_a_childs_measured_steps_are_timed_by_cuda_events(monkeypatch: pytest.MonkeyPatch) -> None:
    # compare --rerun and fix --prove time their measured steps as check's clean window
    FakeEvent.clock = [0.0, 30.0, 60.0, 90.0, 120.0]  # the GPU: 30 ms a step
    clock, timed = _child_clock(monkeypatch, FakeCuda())
    with pytest.raises(StopScript):
        for _ in range(20):
            clock.tick("optimizer")
    t = timed.timing
    assert t is not None and t.clock == "cuda-events" and t.first_step == 4
    assert t.step_ms == pytest.approx((30.0,) * 4) and len(t.host_step_ms) == 4
    from torchdoctor.capture.timed_window import measured_step_ms

    assert measured_step_ms({"timed": timed.to_dict()}) == pytest.approx([30.0] * 4)


def test_a_cpu_childs_steps_stay_on_the_host_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, timed = _child_clock(monkeypatch, None)
    with pytest.raises(StopScript):
        for _ in range(20):
            clock.tick("optimizer")
    t = timed.timing
    assert t is not None and t.clock == "host"
    assert t.step_ms == pytest.approx([s * 1e3 for s in clock.step_s[3:7]])
    from torchdoctor.capture.timed_window import measured_step_ms

    assert measured_step_ms({"timed": timed.to_dict()}) is None  # the parent keeps step_ms
