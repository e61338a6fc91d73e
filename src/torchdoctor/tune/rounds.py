"""Interleaved rounds inside one trial process (``ab.rounds``; why inside: ``ab``): every arm
trains one timed window per round. An *arm* is one configuration's model, optimizer and data
loader, built from the same seed; the search decides on the per-round ratios (``ab.compare``).

A window is what the user's loop does: no ``.item()``, no synchronisation per step. The losses
stay on the device and are read once, after the window's single synchronisation. On CUDA the
window is timed with CUDA events; elsewhere with the host clock, through the same code.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from torchdoctor import ab
from torchdoctor.ab.rounds import run_rounds as run_window_rounds
from torchdoctor.capture.config_probe import set_backend_flags


class WindowClock:
    """Times a window of queued device work: CUDA events on CUDA, the host clock elsewhere.

    Apart from check's ``capture.timed_window.TimedWindow`` on purpose. That one runs in the
    user's process: a failing CUDA call falls back to the host's unsynchronised step times, and
    a device-wide sync at its start ties the GPU's clock to the host's for each step's host
    lead. Here the process is the trial's own, so a CUDA failure fails the trial instead of
    feeding host times to the decision, and a window's total needs no host lead (its start
    event runs behind the work queued before it: no sync at the start)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._cuda = device.type == "cuda"
        self._start: Any = None

    def start(self) -> None:
        """Mark the window's start (the previous window already waited for the device)."""
        if self._cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record(torch.cuda.current_stream(self.device))
        else:
            self._start = time.perf_counter()

    def stop(self) -> float:
        """Seconds since :meth:`start`; waits for the device once (the window's one sync)."""
        if self._cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record(torch.cuda.current_stream(self.device))
            end.synchronize()
            return float(self._start.elapsed_time(end)) / 1e3
        return time.perf_counter() - float(self._start)


def rng_state() -> tuple[Any, ...]:
    """The process's random streams: torch (CPU and every CUDA device), numpy, random."""
    import numpy as np

    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    return (torch.get_rng_state(), cuda, np.random.get_state(), random.getstate())


def set_rng_state(state: tuple[Any, ...]) -> None:
    """Restore what :func:`rng_state` returned."""
    import numpy as np

    cpu, cuda, np_state, py_state = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
    np.random.set_state(np_state)
    random.setstate(py_state)


def _most_of_ranks(value: float, device: torch.device) -> float:
    """Under torchrun: the largest ``value`` of all ranks, so that every rank decides the same
    way (the slowest rank's window time; the gravest reason to stop); else ``value``."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


@dataclass
class TrainingArm:
    """One configuration training in this process."""

    label: str
    """candidate, incumbent or baseline."""
    loop: Any
    """The worker's training loop (``step()`` returns the step's loss as a device tensor)."""
    flags: dict[str, Any]
    """Process-wide settings a configuration may change (TF32 through either API, the float32
    matmul precision, cuDNN autotuning) as this arm's setup left them (``backend_flags``), put
    back before each of its windows: each arm runs under its own settings."""
    rng: tuple[Any, ...] = field(default_factory=rng_state)
    """This arm's random streams (dropout, augmentation): each arm draws the numbers it would
    draw alone, so its losses match a trial of it alone, whatever the interleaving."""
    losses: list[float] = field(default_factory=list)
    """Loss of every optimizer step from step 0, warm-up included."""
    warmup_times_s: list[float] = field(default_factory=list)
    """Warm-up step times (each synchronised: they hold compile time)."""
    window_steps_s: list[float] = field(default_factory=list)
    """Mean step time of each measured window, in seconds."""
    busy_s: float = 0.0
    """Total time of the measured windows, in seconds."""

    def warmup(self, steps: int, clock: WindowClock) -> None:
        """Run ``steps`` steps, each timed alone (compile happens here)."""
        set_backend_flags(self.flags)
        set_rng_state(self.rng)
        for _ in range(steps):
            clock.start()
            loss = self.loop.step()
            self.warmup_times_s.append(clock.stop())
            self.losses.append(float(loss.item()))
        self.rng = rng_state()
        self.loop.wait_s = 0.0

    def window(self, steps: int, clock: WindowClock) -> float:
        """Run one timed window of ``steps`` steps; returns its mean step time in seconds."""
        set_backend_flags(self.flags)
        set_rng_state(self.rng)
        clock.start()
        pending = [self.loop.step() for _ in range(steps)]
        elapsed = _most_of_ranks(clock.stop(), clock.device)
        self.rng = rng_state()
        # One read of the device buffer, after the window's one synchronisation.
        self.losses += torch.stack(pending).float().cpu().tolist()
        self.busy_s += elapsed
        self.window_steps_s.append(elapsed / steps)
        return elapsed / steps

    def nonfinite_step(self) -> int | None:
        """Index of the first non-finite loss, or None."""
        return next((i for i, x in enumerate(self.losses) if not math.isfinite(x)), None)


@dataclass(frozen=True)
class RoundPlan:
    """How many rounds to run and when to stop early."""

    steps: int
    """Optimizer steps per arm per round (one timed window)."""
    min_rounds: int
    """Rounds before any decision (6: the fewest with a 95% signed-rank interval)."""
    max_rounds: int
    """Rounds at most."""
    max_s: float
    """Stop starting rounds after this many seconds of rounds."""
    min_gain: float
    """The gain the candidate must clear (its interval's lower end above 1 + min_gain)."""
    seed: int
    """Seed of the per-round shuffle (the same on every rank)."""


_STOPS = ("", "decided", "time", "nonfinite")
"""Reasons to stop, gravest last: under torchrun every rank stops when any does, for the
gravest reason (no rank is left waiting in a collective of a window the others never start)."""


def _why_stop(
    arms: list[TrainingArm], ref: TrainingArm, plan: RoundPlan, done: int, elapsed_s: float
) -> str:
    if arms[0].nonfinite_step() is not None:
        return "nonfinite"
    if done < plan.min_rounds:
        return ""
    if len(arms) == 1:
        return "decided"
    got = ab.compare(ref.window_steps_s, arms[0].window_steps_s, plan.min_gain)
    if got.decision != "undecided":
        return "decided"
    return "time" if elapsed_s > plan.max_s else ""


def run_rounds(arms: list[TrainingArm], plan: RoundPlan, clock: WindowClock) -> str | None:
    """Interleave windows of ``arms`` (``ab.rounds``) until decided; why it stopped early, or None.

    The candidate (``arms[0]``) is compared with the incumbent arm, else the baseline arm; a
    single arm runs ``min_rounds`` rounds. Stops at the first non-finite candidate loss.
    """
    ref = next((a for a in arms[1:] if a.label == "incumbent"), arms[-1])
    started = time.monotonic()

    def after(rnd: int, _: object) -> str:
        why = _why_stop(arms, ref, plan, rnd + 1, time.monotonic() - started)
        return _STOPS[int(_most_of_ranks(_STOPS.index(why), clock.device))]

    def window(arm: TrainingArm, _: int) -> float:
        return arm.window(plan.steps, clock)

    played = run_window_rounds(arms, window, plan.max_rounds, plan.seed, after_round=after)
    return None if played.stopped in ("decided", "rounds") else played.stopped


def window_steps(requested: int, steps_per_epoch: int | None) -> int:
    """Steps per window: ``requested``, rounded up to whole epochs when an epoch is short.

    Whole epochs put the same epoch start (worker start-up without persistent workers) in every
    window, so windows of one arm are alike.
    """
    if steps_per_epoch and steps_per_epoch <= requested:
        return -(-requested // steps_per_epoch) * steps_per_epoch
    return requested
