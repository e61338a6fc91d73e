"""What ``torchdoctor check`` watches and for how long: one validated dataclass."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torchdoctor.errors import UserError
from torchdoctor.inputs import absolute_path

AFTER_STEPS = 5
"""Steps timed clean again after the instruments (at most the clean window's length): the
profiler's start leaves CUPTI slower until it is torn down, and a script that runs on after
``check`` pays that. Too few steps for their own interval: they are compared with the clean
window's range."""


@dataclass(frozen=True)
class Schedule:
    """The steps of one ``check`` run, numbered from 1 as the clock counts them.

    With a clean window (``clean_steps`` > 0)::

        1 .. W              warm-up (step W: the work count and forward watch, when W >= 2)
        W+1 .. W+C          clean: timed by their boundaries only, nothing armed
        W+C+1               the profiler's own warm-up step (its start-up cost, ours)
        W+C+2 .. W+C+1+P    profiled and measured (sampler, sync sites, modes)
        then A steps        clean again (the instruments' after-effect), then the toggles

    Without one, as before: the probe and the profiler's warm-up are the last warm-up steps and
    the profiled steps are W+1 .. W+P.
    """

    warmup: int
    clean: tuple[int, int] | None
    """First and last clean step, None without a clean window."""
    probe_step: int | None
    """The step whose work is counted (FLOPs, bytes) and whose forwards are watched."""
    open_after: int
    """The profiler starts when this many steps have ended."""
    profiler_warmup: int
    """Steps the profiler records and discards first (0 or 1)."""
    lead: int
    """Steps before the first measured one (``run.json``'s ``steps.warmup_steps``)."""
    last_profiled: int
    after: tuple[int, int] | None
    """First and last step of the clean window after the instruments, None without one."""

    @classmethod
    def of(cls, warmup: int, clean: int, profile: int) -> Schedule:
        """The schedule for ``--warmup W --clean-steps C --steps P``."""
        if clean <= 0:
            pw = 1 if warmup >= 2 else 0
            start = warmup - pw
            return cls(
                warmup,
                None,
                start if start >= 2 else None,
                start,
                pw,
                warmup,
                warmup + profile,
                None,
            )
        lead = warmup + clean + 1
        last = lead + profile
        after = min(AFTER_STEPS, clean)
        return cls(
            warmup,
            (warmup + 1, warmup + clean),
            warmup if warmup >= 2 else None,
            warmup + clean,
            1,
            lead,
            last,
            (last + 1, last + after),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``run.json`` (``steps.schedule``)."""
        return {
            "warmup": self.warmup,
            "clean": list(self.clean) if self.clean else None,
            "probe_step": self.probe_step,
            "profiler_warmup_step": self.open_after + 1 if self.profiler_warmup else None,
            "profiled": [self.lead + 1, self.last_profiled],
            "after": list(self.after) if self.after else None,
        }


@dataclass(frozen=True)
class CheckOptions:
    """The effective ``check`` configuration, recorded in every ``run.json``."""

    warmup_steps: int = 5
    """Steps run before profiling starts; they absorb torch.compile and allocator warm-up."""
    profile_steps: int = 5
    """Steps recorded by the profiler after the warm-up."""
    clean_steps: int = 8
    """Steps timed right after the warm-up with nothing armed but the step boundaries (CUDA
    events on a GPU, the host clock on a CPU), before any instrument starts: the report's step
    time. 0 leaves them out (the profiled steps then follow the warm-up directly)."""
    full: bool = False
    """Let the script run to its end instead of stopping it after the profiled steps."""
    record_shapes: bool = False
    """Record operator input shapes (adds profiler overhead on small ops)."""
    with_stack: bool = False
    """Record Python stacks for operators (the largest profiler overhead)."""
    profile_memory: bool = False
    """Record allocations in the trace and, on CUDA, the allocator history for OOM snapshots."""
    out_dir: str = "torchdoctor-runs"
    """Parent folder of run folders, made absolute when the options are built: the script may
    change its working directory (Hydra's job.chdir) before anything is written there."""
    rank_timeout_s: float = 120.0
    """How long rank 0 waits for the other ranks' results before summarising without them."""
    nvml_interval_s: float = 0.1
    """Sampling period of the NVML thread (GPU utilisation and memory)."""
    timeout_s: float | None = None
    """Stop the script after this many seconds, as Ctrl-C would (None: no limit)."""
    profile_memory_budget_mb: float = 1024.0
    """What the profiler's recording may add to the process's resident memory (MiB; never
    more than a quarter of the memory available when the window opens). torch keeps about
    8 kB per operator while recording: a step of a million small operators would need 8 GB a
    step. At the budget the window ends (at a step boundary when the next step would cross
    it, else at the next model call) and the report covers what was recorded."""
    no_step_notice_s: float = 60.0
    """Say on standard error when no step has been seen for this long (seconds)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_dir", absolute_path(self.out_dir, "the run folders' parent"))
        if self.warmup_steps < 0:
            raise UserError(f"--warmup must be >= 0; got {self.warmup_steps}")
        if self.profile_steps < 1:
            raise UserError(f"--steps must be >= 1; got {self.profile_steps}")
        if self.clean_steps < 0:
            raise UserError(f"--clean-steps must be >= 0; got {self.clean_steps}")
        if self.rank_timeout_s < 0:
            raise UserError(f"rank timeout must be >= 0; got {self.rank_timeout_s}")
        if self.profile_memory_budget_mb <= 0:
            raise UserError(
                f"profiler memory budget must be > 0; got {self.profile_memory_budget_mb}"
            )
        if self.no_step_notice_s <= 0:
            raise UserError(f"no-step notice must be > 0 s; got {self.no_step_notice_s}")
        if self.nvml_interval_s <= 0:
            raise UserError(f"NVML interval must be > 0; got {self.nvml_interval_s}")
        if self.timeout_s is not None and not 0 < self.timeout_s < 1e9:
            raise UserError(f"--timeout must be more than 0 seconds; got {self.timeout_s}")

    @property
    def schedule(self) -> Schedule:
        """Which step does what (see :class:`Schedule`)."""
        return Schedule.of(self.warmup_steps, self.clean_steps, self.profile_steps)

    @property
    def last_profiled_step(self) -> int:
        """Number (1-based) of the last profiled step."""
        return self.schedule.last_profiled

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``run.json``."""
        return dataclasses.asdict(self)
