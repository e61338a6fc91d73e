"""Interleaved rounds inside one trial process (``ab.rounds``; why inside: ``ab``): every arm
trains one timed window per round. An *arm* is one configuration's model, optimizer and data
loader, built from the same seed; the search decides on the per-round ratios (``ab.compare``).

A window is what the user's loop does: no ``.item()``, no synchronisation per step. The losses
stay on the device and are read once, after the window's single synchronisation. On CUDA the
window is timed with CUDA events; elsewhere with the host clock, through the same code.
"""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from torchdoctor import ab
from torchdoctor.ab.rounds import run_rounds as run_window_rounds


class WindowClock:
    """Times a window of queued device work: CUDA events on CUDA, the host clock elsewhere."""

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


def global_flags() -> dict[str, Any]:
    """Process-wide settings a configuration may change (TF32 through either API, the float32
    matmul precision, cuDNN autotuning), read by the one backend-flags reader: it never raises,
    also after a workload switched to the ``fp32_precision`` API (reading the legacy flags then
    raises)."""
    from torchdoctor.capture.config_probe import backend_flags

    return backend_flags()


def set_global_flags(flags: dict[str, Any]) -> None:
    """Restore what :func:`global_flags` returned (each arm runs under its own settings)."""
    from torchdoctor.capture.config_probe import set_backend_flags

    set_backend_flags(flags)


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


def _agree_s(seconds: float, device: torch.device) -> float:
    """Under torchrun: the slowest rank's window time, so every rank decides the same way."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return seconds
    t = torch.tensor([seconds], dtype=torch.float64, device=device)
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
    """Process-wide settings as this arm's setup left them."""
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
        set_global_flags(self.flags)
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
        set_global_flags(self.flags)
        set_rng_state(self.rng)
        clock.start()
        pending = [self.loop.step() for _ in range(steps)]
        elapsed = _agree_s(clock.stop(), clock.device)
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


_STOPS = ("", "decided", "time", "nonfinite")  # codes agreed across ranks (the highest wins)


def _agree_stop(why: str, device: torch.device) -> str:
    """Under torchrun: every rank stops when any does, for the gravest reason (no rank is left
    waiting in a collective of a window the others never start)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return why
    t = torch.tensor([_STOPS.index(why)], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return _STOPS[int(t.item())]


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
        return _agree_stop(why, clock.device)

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


def world_size() -> int:
    """Processes of this trial (1 outside torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))
