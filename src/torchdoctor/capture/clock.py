"""Step detection and the profiling schedule.

Five signals can mark a step: an explicit ``torchdoctor.step()`` marker, an optimizer step,
a DataLoader batch, a ``backward()`` call and a top-level model call
(``capture/forward_steps.py``). The strongest signal seen so far wins (marker > optimizer >
backward > batch > forward), so a training loop is counted by optimizer steps even though its
batches and forwards come first, a hand-written SGD loop (no optimizer, no DataLoader) by its
backward calls, an inference loop without either falls back to batches, and a decode loop with
none of them to its model calls. ``tick`` is on every step's path, so
outside the profiled window it does a few appends, one comparison and one ``pread`` of each
computing thread's run-queue wait (``cpu_usage.StepWait``: a few microseconds, outside the
step's own time).

Steps are counted in one thread: the first that ticks. Other threads stepping their own
optimizers are not this loop's steps (their ticks are counted apart). When that thread is not
the main one, the profiler is never started from it (torch's profiler must start where its
client registered) and the script is never stopped: its steps are timed, it runs to its end.
"""

from __future__ import annotations

import math
import threading
from array import array
from time import perf_counter
from typing import Any, Literal

from torchdoctor.capture.cpu_usage import (
    Reading,
    StepWait,
    step_lost_s,
    step_run_s,
    step_threads_wait_s,
)
from torchdoctor.capture.options import CheckOptions
from torchdoctor.capture.switchboard import KERNEL_STEPS, SYNC_STEPS

StepSource = Literal["forward", "dataloader", "backward", "optimizer", "marker"]
_PRIORITY: dict[str, int] = {
    "forward": 0,
    "dataloader": 1,
    "backward": 2,
    "optimizer": 3,
    "marker": 4,
}

POST_WINDOWS: tuple[tuple[str, int, bool], ...] = (
    ("kernels", KERNEL_STEPS, True),
    ("sync-debug", SYNC_STEPS, False),
)
"""Windows after the profiled one that run only when the listener asks for them (on a GPU):
name, steps, and whether those steps are timed (``capture/switchboard.py``)."""

__all__ = ["KERNEL_STEPS", "POST_WINDOWS", "SYNC_STEPS", "StepClock", "StopScript"]


class StopScript(BaseException):
    """Raised from a step hook to end the script once the profiled steps are recorded.

    A ``BaseException`` so that a script's ``except Exception`` does not swallow it; its
    ``finally`` blocks and context managers still run.
    """


LISTENER_CALLS: dict[str, str] = {
    "window_start": "(profiler_warmup_steps) start profiling; the profiler's own warm-up lasts "
    "that many steps",
    "window_step": "one step ended inside the profiled window",
    "window_end": "the last profiled step ended",
    "window_abort": "discard the profiled window (the step signal changed)",
    "set_measuring": "(on) steps after the warm-up begin (True) or counting restarts (False)",
    "enter": "(window) a window of the plan begins: ``probe`` (the warm-up step before the "
    "profiler's own warm-up) or one timed by its step boundaries only (``clean``, ``after``)",
    "leave": "(window) that window's last step ended (also an extra window's, below)",
    "timed_step": "(window, host_end_s) a timed step ended at ``host_end_s`` (``perf_counter``)",
    "timed_abort": "discard the timed windows (the step signal changed)",
    "experiments_begin": "question, after the window when the script is to stop: run extra steps?",
    "experiment_tick": "question, (step_s) an extra step of ``step_s`` seconds ended: run another?",
    "extra_window_begin": "question, (window) after the profiled window: run ``window`` "
    "(``POST_WINDOWS``)? True when it started",
}
"""What the clock calls on its listener, by method name: the arguments and what the call means.
A listener defines only the calls it needs: the clock skips a call the listener lacks, and a
question it lacks (or that raises) answers no."""


class StepClock:
    """Counts steps, times them, and opens and closes the profiled window."""

    def __init__(self, options: CheckOptions, listener: Any) -> None:
        self.options = options
        self.listener = listener
        self.source: str | None = None
        self.switches: list[str] = []
        self.errors: list[str] = []
        self.log: Any = None
        """An ``EvidenceLog`` that gets every step as it ends (None: no log)."""
        self.owner: int | None = None
        """The thread whose steps are counted (the first that ticks)."""
        self.other_thread_ticks = 0
        self.bookkeeping = False
        """True while our own work runs at a step boundary (``_advance``: a probe, the profiler's
        start or end): the watcher thread samples no step then."""
        self.profiles = True
        """False when the counted thread is not the main one (no window, no StopScript)."""
        self._prio = -1
        self._begin_pending = False
        self._core: StepWait | None = None
        """The counted thread's and its helpers' run-queue wait (opened at adoption)."""
        self._reset()

    def _reset(self) -> None:
        self.step_s = array("d")
        """Wall time of each step in seconds (our own window bookkeeping excluded)."""
        self.data_wait_s = array("d")
        """Seconds of each step spent inside ``DataLoader.__next__``."""
        self.core_wait_s = array("d")
        """Seconds of each step lost to waiting for a core (the scheduler's run-queue wait:
        other processes held the cores), the counted thread's and its helpers'
        (``cpu_usage.step_lost_s``); NaN where unknown."""
        self.threads_wait_s = array("d")
        """Seconds of each step its helpers waited for a core beyond ``core_wait_s``
        (``cpu_usage.step_threads_wait_s``); NaN where unknown."""
        self.run_s = array("d")
        """CPU seconds each step's thread and its helpers ran (``cpu_usage.step_run_s``: the
        work it did, and their spinning); NaN where unknown."""
        self.window_opened = False
        self.window_closed = False
        self._pending_wait = 0.0
        sched = self.options.schedule
        self.schedule = sched
        # The profiler gets one warm-up step of its own when there is room for it, so that its
        # start-up cost does not land in the first recorded step.
        self._profiler_warmup = sched.profiler_warmup
        self._start_at = sched.open_after
        # The probe step (work count, forward watch) is a warm-up step before any timed or
        # profiled one; the first step (script set-up included) never is one.
        self._probe_at = sched.probe_step
        self._timing: str | None = None
        """The timed window the current step belongs to (``clean``, ``after``), if any."""
        self._next_event: float = self._following(0)
        self._step_end = 0.0
        self._timed_last = 0
        """The last step of the timed window in progress."""
        self._post: list[tuple[str, int, bool]] = []
        self._extra: tuple[str, int, bool] | None = None
        self._extra_left = 0
        self.extra_windows: dict[str, tuple[int, int]] = {}
        """The windows after the profiled one that ran (``POST_WINDOWS``): first, last step."""
        self.experimenting = False
        self.experiment_steps = 0
        self.own_steps: list[int] = []
        """Steps (1-based) in which torchdoctor did work of its own (the probe step, the
        profiler's first step)."""
        self._restart_step()

    def _restart_step(self) -> None:
        """A step starts now: its wall clock and its thread's run-queue wait so far."""
        self._step_start = perf_counter()
        self._core_start = self._core_read()

    def _core_read(self) -> Reading | None:
        return self._core.read() if self._core is not None else None

    def begin(self) -> None:
        """Start timing; with zero warm-up steps the clean window (or the profiler) starts now."""
        self._begin_pending = False
        self._restart_step()
        clean = self.schedule.clean
        if clean is not None and clean[0] == 1:
            self._timed_start("clean", clean[1])
        if self._start_at == 0:
            self._open()
        if self.schedule.lead == 0:
            self._call("set_measuring", True)

    def _following(self, n: int) -> float:
        """The next step count after ``n`` at which the schedule does something."""
        sched = self.schedule
        marks = [sched.open_after, sched.lead, sched.last_profiled]
        if self._probe_at is not None:
            marks += [self._probe_at - 1, self._probe_at]
        if sched.clean is not None:
            marks.append(sched.clean[0] - 1)
        later = [m for m in marks if m > n]
        return min(later) if later else math.inf

    def _timed_start(self, name: str, last: int) -> None:
        self._timing = name
        self._timed_last = last
        self._next_event = len(self.step_s) + 1  # every step of a timed window is recorded
        self._call("enter", name)

    def add_wait(self, seconds: float) -> None:
        """Add time spent waiting for a batch to the current step."""
        self._pending_wait += seconds

    def tick(self, source: str) -> None:
        """Mark the end of a step seen by ``source``; may raise ``StopScript``."""
        ident = threading.get_ident()
        if ident != self.owner:
            if self.owner is not None:
                self.other_thread_ticks += 1
                return
            self._adopt(ident)
        prio = _PRIORITY[source]
        if self._begin_pending and prio == self._prio:
            self._begin_pending = False
            started = self._step_start, self._core_start
            self.begin()
            self._step_start, self._core_start = started
        if prio != self._prio:
            if prio < self._prio:
                return
            if self._switch(source, prio):
                # A window was discarded inside this very hook (an optimizer step runs its
                # hooks inside the profiler range torch opened for it): opening the next one
                # here would end that range in another profiler session, which crashes torch.
                # This partial step is dropped; counting starts at the next signal.
                self._restart_step()
                return
        now = perf_counter()
        # one pread per thread of its schedstat (about 1 us each): what the CPU gave this step
        core = self._core_read()
        self._step_end = now
        self.step_s.append(now - self._step_start)
        self.data_wait_s.append(self._pending_wait)
        self.core_wait_s.append(step_lost_s(now - self._step_start, self._core_start, core))
        self.threads_wait_s.append(
            step_threads_wait_s(now - self._step_start, self._core_start, core)
        )
        self.run_s.append(step_run_s(self._core_start, core))
        if self.log is not None:
            self.log.step(now - self._step_start, self._pending_wait)
        self._pending_wait = 0.0
        n = len(self.step_s)
        if n >= self._next_event:
            self.bookkeeping = True
            try:
                self._advance(n)
            finally:
                self.bookkeeping = False
            # our bookkeeping (a profiler starting) may wait for a core too: not the next step's
            core = self._core_read()
        if n % 64 == 2 and self._core is not None:  # intra-op threads started since
            self._core.refresh()
            core = self._core_read()
        self._step_start, self._core_start = perf_counter(), core

    @property
    def steps(self) -> int:
        """Steps seen so far by the winning signal."""
        return len(self.step_s)

    def core_wait_so_far_s(self) -> float:
        """Seconds the counted thread alone has waited for a core since the current step began
        (0 when unknown); read by the watcher thread (its helpers' counters are the clock's)."""
        start = self._core_start
        now = self._core.main() if self._core is not None and start is not None else None
        return max(0, now[1] - start[1]) / 1e9 if now is not None and start else 0.0

    @property
    def step_end_s(self) -> float:
        """When the last step ended (``perf_counter``, before our bookkeeping)."""
        return self._step_end

    def _adopt(self, ident: int) -> None:
        self.owner = ident
        self._core = StepWait()  # in the counted thread: its own schedstat and its helpers'
        if ident != threading.main_thread().ident:
            # No window from this thread: the profiler is left to the main thread (which
            # stops it at the end if it opened at the start), and no StopScript, which would
            # end this thread alone.
            self.profiles = False
            self.errors.append(
                "steps come from a thread other than the main one: timed, not profiled, "
                "and the script runs to its end"
            )

    def close(self) -> None:
        """Close the per-step wait reader's files (idempotent; at the session's end): the
        waits read so far stay, a later step reads none. A guest leaves no descriptor open:
        in-process runs (integrations, tests) would pile them up past select()'s 1024."""
        if self._core is not None:
            self._core.close()

    def quiet(self) -> None:
        """Count nothing from now on (in a forked child of the script)."""
        self.owner = -1
        self.log = None
        if self._core is not None:  # a forked child's copy reads the parent's thread
            self._core.close()

    def before_fork(self) -> None:
        """The script is about to fork: a window being recorded is discarded, for good."""
        if self.window_opened and not self.window_closed:
            self.window_closed = True
            self.profiles = False
            self._call("window_abort")
            self.errors.append(
                "the script forked while the profiler recorded: the window was discarded (a "
                "running profiler cannot be forked); steps are timed, the script runs to its end"
            )

    def _switch(self, source: str, prio: int) -> bool:
        """Count ``source``'s steps from now on; True when an opened window was discarded."""
        if self.log is not None:
            if self.source is not None:
                self.log.restart(f"{self.source}->{source} after {len(self.step_s)} steps")
            self.log.source(source)
        if self.source is None:  # the first signal: the first step started with the script
            self.source, self._prio = source, prio
            return False
        # A stronger signal appeared: what was counted so far measured something else (batches,
        # not optimizer steps), so start counting again.
        self.switches.append(f"{self.source}->{source} after {len(self.step_s)} steps")
        self._call("leave", "probe")  # a probe of the weaker signal's steps ends here
        self._call("timed_abort")
        aborted = self.window_opened
        if aborted:  # even a finished window counted the wrong steps: discard it
            self._call("window_abort")
        self._call("set_measuring", False)
        self.source, self._prio = source, prio
        started = self._step_start, self._core_start
        self._reset()
        if aborted:
            self._begin_pending = True  # at the next signal, outside this hook's range
            return True
        self.begin()
        self._step_start, self._core_start = started  # this step began at the last weaker signal
        return False

    def _advance(self, n: int) -> None:
        sched = self.schedule
        if not self.profiles:  # steps from a thread other than the main one
            if n == sched.lead:
                self._call("set_measuring", True)
            self._next_event = n + 1 if n < sched.lead else math.inf
            return
        if self.experimenting:
            self.experiment_steps += 1
            if not self._ask("experiment_tick", self.step_s[-1]):
                self.experimenting = False
                raise StopScript
            self._next_event = n + 1
            return
        if self._extra is not None:
            self._extra_tick(n)
            return
        if self._timing is not None and self._timed_tick(n):
            return
        if self._probe_at is not None:
            if n == self._probe_at - 1:
                self.own_steps.append(n + 1)
                self._call("enter", "probe")
            elif n == self._probe_at:
                self._call("leave", "probe")
        if sched.clean is not None and n == sched.clean[0] - 1 and n > 0:
            self._timed_start("clean", sched.clean[1])
            self._next_event = n + 1
            return
        if n == self._start_at and not self.window_opened:
            self._open()
        if n == sched.lead:
            self._call("set_measuring", True)
        if self.window_opened and not self.window_closed and n > self._start_at:
            self._call("window_step")
        if n >= sched.last_profiled and not self.window_closed:
            self.window_closed = True
            self._next_event = math.inf
            self._call("window_end")
            if sched.after is not None:
                # the kernel window and sync-debug mode in steps of their own: each would bend
                # the profiled ones (on a GPU; a CPU run goes straight to the after window)
                self._post = list(POST_WINDOWS)
            self._next_post(n)
            return
        self._next_event = n + 1 if self.window_opened else self._following(n)

    def _next_post(self, n: int) -> None:
        """Start the next window after the profiled one that the listener wants, or go on."""
        while self._post:
            name, steps, timed = self._post.pop(0)
            if self._ask("extra_window_begin", name):
                self._extra, self._extra_left = (name, steps, timed), steps
                self.extra_windows[name] = (n + 1, n + steps)
                self._next_event = n + 1
                return
        self._after_profiled(n)

    def _extra_tick(self, n: int) -> None:
        assert self._extra is not None
        name, _, timed = self._extra
        if timed:
            self._call("timed_step", name, self._step_end)
        self._extra_left -= 1
        self._next_event = n + 1
        if self._extra_left:
            return
        self._extra = None
        self._call("leave", name)
        self._next_post(n)

    def _after_profiled(self, n: int) -> None:
        """The instruments are off: time their after-effect clean, or finish."""
        after = self.schedule.after
        if after is not None:
            self._timed_start("after", n + after[1] - after[0] + 1)
            self._next_event = n + 1
            return
        self._next_event = math.inf
        self._finish(n)

    def _timed_tick(self, n: int) -> bool:
        """A step of a timed window ended; True when the schedule has nothing else to do now."""
        name = self._timing
        assert name is not None
        self._call("timed_step", name, self._step_end)
        if n < self._timed_last:
            self._next_event = n + 1
            return True
        self._timing = None
        self._call("leave", name)
        if name == "after":
            self._next_event = math.inf
            self._finish(n)
            return True
        return False  # the clean window's end: the profiler may start at this boundary

    def _finish(self, n: int) -> None:
        """Everything scheduled is done: the toggles, then the script stops (unless --full)."""
        if self.options.full:
            return
        if self._ask("experiments_begin"):  # a few extra steps measure a mode's cost
            self.experimenting = True
            self._next_event = n + 1
            return
        raise StopScript

    def _open(self) -> None:
        # The next step is the profiler's first (its own warm-up when there is one): it pays
        # the recorder's start-up, which is ours, not the script's.
        self.own_steps.append(len(self.step_s) + 1)
        if self.log is not None:
            self.log.window_opened()
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
        first = self.schedule.lead + 1
        last = min(self.steps, self.schedule.last_profiled)
        return (first, last) if last >= first else None
