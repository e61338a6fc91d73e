"""Step detection and the profiling schedule.

Three signals can mark a step: an explicit ``torchdoctor.step()`` marker, an optimizer step,
and a DataLoader batch. The strongest signal seen so far wins (marker > optimizer > batch), so a
training loop is counted by optimizer steps even though its batches arrive first, and an
inference loop without an optimizer falls back to batches. ``tick`` is on every step's path, so
outside the profiled window it does a few appends and one comparison.
"""

from __future__ import annotations

import math
from array import array
from time import perf_counter
from typing import Literal, Protocol

from torchdoctor.capture.options import CheckOptions

StepSource = Literal["dataloader", "optimizer", "marker"]
_PRIORITY: dict[str, int] = {"dataloader": 0, "optimizer": 1, "marker": 2}


class StopScript(BaseException):
    """Raised from a step hook to end the script once the profiled steps are recorded.

    A ``BaseException`` so that a script's ``except Exception`` does not swallow it; its
    ``finally`` blocks and context managers still run.
    """


class WindowListener(Protocol):
    """What the clock drives: the profiler and the per-step recorders."""

    def window_start(self, profiler_warmup_steps: int) -> None:
        """Start profiling; the profiler's own warm-up lasts that many steps."""

    def window_step(self) -> None:
        """One step ended inside the window."""

    def window_end(self) -> None:
        """The last profiled step ended."""

    def window_abort(self) -> None:
        """Discard the window (the step signal changed)."""

    def set_measuring(self, on: bool) -> None:
        """Steps after the warm-up begin (on) or counting restarts (off)."""

    def probe_start(self) -> None:
        """The probe step begins (the warm-up step before the profiler's own warm-up)."""

    def probe_end(self) -> None:
        """The probe step ended."""

    def experiments_begin(self) -> bool:
        """After the window, when the script is to stop: run extra steps? (True: yes)."""
        return False

    def experiment_tick(self, step_s: float) -> bool:
        """An extra step of ``step_s`` seconds ended; True to run another."""
        return False


class StepClock:
    """Counts steps, times them, and opens and closes the profiled window."""

    def __init__(self, options: CheckOptions, listener: WindowListener) -> None:
        self.options = options
        self.listener = listener
        self.source: str | None = None
        self.switches: list[str] = []
        self.errors: list[str] = []
        self._prio = -1
        self._reset()

    def _reset(self) -> None:
        self.step_s = array("d")
        """Wall time of each step in seconds (our own window bookkeeping excluded)."""
        self.data_wait_s = array("d")
        """Seconds of each step spent inside ``DataLoader.__next__``."""
        self.window_opened = False
        self.window_closed = False
        self._pending_wait = 0.0
        warmup = self.options.warmup_steps
        # The profiler gets one warm-up step of its own when there is room for it, so that its
        # start-up cost does not land in the first recorded step.
        self._profiler_warmup = 1 if warmup >= 2 else 0
        self._start_at = warmup - self._profiler_warmup
        # The probe step (work count, forward watch) is the warm-up step just before the
        # window opens; the first step (script set-up included) never is one.
        self._probe_at = self._start_at if self._start_at >= 2 else None
        self._next_event: float = self._start_at if self._probe_at is None else self._probe_at - 1
        self.experimenting = False
        self.experiment_steps = 0
        self._step_start = perf_counter()

    def begin(self) -> None:
        """Start timing; with zero warm-up steps the window opens now."""
        self._step_start = perf_counter()
        if self._start_at == 0:
            self._open()
        if self.options.warmup_steps == 0:
            self._call("set_measuring", True)

    def add_wait(self, seconds: float) -> None:
        """Add time spent waiting for a batch to the current step."""
        self._pending_wait += seconds

    def tick(self, source: str) -> None:
        """Mark the end of a step seen by ``source``; may raise ``StopScript``."""
        prio = _PRIORITY[source]
        if prio != self._prio:
            if prio < self._prio:
                return
            self._switch(source, prio)
        now = perf_counter()
        self.step_s.append(now - self._step_start)
        self.data_wait_s.append(self._pending_wait)
        self._pending_wait = 0.0
        n = len(self.step_s)
        if n >= self._next_event:
            self._advance(n)
        self._step_start = perf_counter()

    @property
    def steps(self) -> int:
        """Steps seen so far by the winning signal."""
        return len(self.step_s)

    def _switch(self, source: str, prio: int) -> None:
        if self.source is None:  # the first signal: the first step started with the script
            self.source, self._prio = source, prio
            return
        # A stronger signal appeared: what was counted so far measured something else (batches,
        # not optimizer steps), so start counting again.
        self.switches.append(f"{self.source}->{source} after {len(self.step_s)} steps")
        self._call("probe_end")  # a probe of the weaker signal's steps ends here
        if self.window_opened:  # even a finished window counted the wrong steps: discard it
            self._call("window_abort")
        self._call("set_measuring", False)
        self.source, self._prio = source, prio
        step_start = self._step_start
        self._reset()
        self.begin()
        self._step_start = step_start  # this step began at the last weaker signal

    def _advance(self, n: int) -> None:
        opts = self.options
        if self.experimenting:
            self.experiment_steps += 1
            if not self._ask("experiment_tick", self.step_s[-1]):
                self.experimenting = False
                raise StopScript
            self._next_event = n + 1
            return
        if self._probe_at is not None:
            if n == self._probe_at - 1:
                self._call("probe_start")
            elif n == self._probe_at:
                self._call("probe_end")
        if n == self._start_at and not self.window_opened:
            self._open()
        if n == opts.warmup_steps:
            self._call("set_measuring", True)
        if self.window_opened and not self.window_closed and n > self._start_at:
            self._call("window_step")
        if n >= opts.last_profiled_step and not self.window_closed:
            self.window_closed = True
            self._next_event = math.inf
            self._call("window_end")
            if not opts.full:
                if self._ask("experiments_begin"):  # a few extra steps measure a mode's cost
                    self.experimenting = True
                    self._next_event = n + 1
                    return
                raise StopScript
            return
        self._next_event = n + 1

    def _open(self) -> None:
        self.window_opened = True
        self._next_event = self._start_at + 1
        self._call("window_start", self._profiler_warmup)

    def _ask(self, name: str, *args: object) -> bool:
        # As _call, for a question: an error of ours answers no.
        fn = getattr(self.listener, name, None)
        if fn is None:  # a listener without this part of the protocol
            return False
        try:
            return bool(fn(*args))
        except Exception as exc:
            self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
            return False

    def _call(self, name: str, *args: object) -> None:
        # A failure in our own bookkeeping must never break the user's training step.
        fn = getattr(self.listener, name, None)
        if fn is None:
            return
        try:
            fn(*args)
        except Exception as exc:
            self.errors.append(f"{name}: {type(exc).__name__}: {exc}")

    @property
    def window_steps(self) -> tuple[int, int] | None:
        """First and last (1-based) step numbers inside the profiled window, if it opened."""
        if not self.window_opened:
            return None
        first = self.options.warmup_steps + 1
        last = min(self.steps, self.options.last_profiled_step)
        return (first, last) if last >= first else None
