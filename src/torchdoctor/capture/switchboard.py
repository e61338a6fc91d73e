"""Which instrument is armed in which window of a ``check`` run: the one switchboard.

The step clock (``capture/clock.py``) numbers the steps and says when each window begins and
ends (``capture/options.py: Schedule``); the session hands every boundary to a
:class:`Switchboard`, which arms and disarms the instruments that :data:`PLAN` lists for that
window, and nothing else. The plan below is the whole story of what ``check`` does to a run::

    probe        one warm-up step         work count, forward watch
    clean        --clean-steps steps      step events, GPU counters
    profiled     profiler's own step +    profiler, NVML sampler, memory history
      measured     --steps steps            line sampler, sync and copy counters, CPU usage
    kernels      3 steps (GPU only)       kernel profiler (CUDA activity only), step events
    sync-debug   3 untimed (GPU only)     sync-debug mode
    after        5 steps                  step events
    experiments  bounded extra steps      toggles

Each instrument sits in the window whose numbers it may bend: the report's step time comes
from the clean window (nothing armed but the step boundaries), the GPU's busy time from the
kernel window (no CPU operator recording, which is what slows dispatch under the profiler),
attribution (operators, lines) from the profiled window, whose slowdown is measured and
printed. ``--clean-steps 0`` keeps the old, stacked schedule: sync-debug mode then runs inside
the profiled window and there is no kernel window.

An instrument that fails to arm or disarm is a note (``capture/guest.py``): the others go on,
and the user's step never sees our exception.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torchdoctor.capture import guest

KERNEL_STEPS = 3
"""Steps the CUDA-activity-only profiler records after the profiled window (on a GPU)."""
SYNC_STEPS = 3
"""Untimed steps that CUDA's sync-debug mode watches, after the kernel window (on a GPU)."""


@dataclass(frozen=True)
class Window:
    """One window of the plan: its name, its steps in words, what is armed in it."""

    name: str
    steps: str
    instruments: tuple[str, ...]
    gpu_only: bool = False
    timed: bool = False
    """Its steps are timed by their boundaries for the report (the probe effect)."""


PLAN: tuple[Window, ...] = (
    Window("probe", "one warm-up step", ("work count", "forward watch")),
    Window(
        "clean",
        "--clean-steps steps after the warm-up",
        ("step events", "GPU counters"),
        timed=True,
    ),
    Window(
        "profiled",
        "the profiler's own first step, then the measured steps",
        ("profiler", "NVML sampler", "memory history"),
    ),
    Window(
        "measured",
        "--steps steps, inside the profiled window",
        ("line sampler", "sync and copy counters", "CPU usage"),
    ),
    Window(
        "kernels",
        f"{KERNEL_STEPS} steps",
        ("kernel profiler", "step events"),
        gpu_only=True,
        timed=True,
    ),
    Window("sync-debug", f"{SYNC_STEPS} untimed steps", ("sync-debug mode",), gpu_only=True),
    Window("after", "up to 5 steps", ("step events",), timed=True),
    Window("experiments", "a few bounded steps per toggle", ("toggles",)),
)
WINDOWS: dict[str, Window] = {w.name: w for w in PLAN}


@dataclass
class Instrument:
    """One instrument as the switchboard sees it: what arms it and what disarms it.

    ``arm`` and ``disarm`` get the window's name; ``abort`` (disarm without keeping what was
    recorded) defaults to ``disarm``. ``gpu``: armed only when the script uses CUDA."""

    name: str
    arm: Callable[[str], Any]
    disarm: Callable[[str], Any]
    abort: Callable[[str], Any] | None = None
    gpu: bool = False


class Switchboard:
    """Arms and disarms the instruments window by window, as :data:`PLAN` says."""

    def __init__(self, cuda: Callable[[], bool], plan: Sequence[Window] = PLAN) -> None:
        self._cuda = cuda
        self._plan = {w.name: w for w in plan}
        self._instruments: dict[str, Instrument] = {}
        self._armed: list[tuple[str, str]] = []
        """(window, instrument) in arming order."""
        self.log: list[dict[str, Any]] = []
        """Per window entered: its name, the step it began after, what was armed, what failed."""

    def add(self, instrument: Instrument) -> None:
        """Register an instrument the plan names (an unknown name is our bug: raise)."""
        if not any(instrument.name in w.instruments for w in self._plan.values()):
            raise ValueError(f"{instrument.name!r} is in no window of the plan")
        self._instruments[instrument.name] = instrument

    @property
    def armed(self) -> list[str]:
        """The instruments armed now, in arming order."""
        return [name for _, name in self._armed]

    def enter(self, window: str, after_step: int, also: Sequence[str] = ()) -> list[str]:
        """Arm what ``window`` lists (and ``also``: an instrument a legacy schedule stacks
        here); returns the instruments armed. A GPU-only window on a CPU arms nothing."""
        plan = self._plan[window]
        entry: dict[str, Any] = {"window": window, "after_step": after_step, "open": True}
        armed: list[str] = []
        failed: list[str] = []
        cuda = self._cuda()
        if not plan.gpu_only or cuda:
            for name in (*plan.instruments, *also):
                inst = self._instruments.get(name)
                if inst is None or (inst.gpu and not cuda) or name in self.armed:
                    continue
                try:
                    inst.arm(window)
                except Exception as exc:
                    guest.note(f"arming the {name} ({window} window)", exc)
                    failed.append(name)
                    continue
                self._armed.append((window, name))
                armed.append(name)
        entry["armed"] = armed
        if failed:
            entry["failed"] = failed
        self.log.append(entry)
        return armed

    def leave(self, window: str, last_step: int) -> None:
        """Disarm what ``window`` armed, the last armed first."""
        self._close(window, last_step, abort=False)

    def abort(self, last_step: int, *windows: str) -> None:
        """Disarm what ``windows`` (every window, when none is named) armed, discarding what it
        recorded (the step signal changed)."""
        for window in dict.fromkeys(w for w, _ in reversed(self._armed)):
            if not windows or window in windows:
                self._close(window, last_step, abort=True)

    def close_all(self, last_step: int) -> None:
        """Disarm everything still armed, keeping what it recorded (the script ended inside
        a window), the window entered last first."""
        for window in dict.fromkeys(w for w, _ in reversed(self._armed)):
            self._close(window, last_step, abort=False)

    def _close(self, window: str, last_step: int, abort: bool) -> None:
        for w, name in list(reversed(self._armed)):
            if w != window:
                continue
            self._armed.remove((w, name))
            inst = self._instruments[name]
            fn = (inst.abort or inst.disarm) if abort else inst.disarm
            try:
                fn(window)
            except Exception as exc:
                guest.note(f"disarming the {name} ({window} window)", exc)
        for entry in reversed(self.log):
            if entry["window"] == window and entry.get("open"):
                entry.pop("open")
                entry["last_step"] = last_step
                if abort:
                    entry["aborted"] = True
                break

    def record(self) -> list[dict[str, Any]]:
        """What was armed in each window, as it ran (``run.json``'s ``steps.instruments``)."""
        return [{k: v for k, v in e.items() if k != "open"} for e in self.log]
