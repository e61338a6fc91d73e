"""What ``torchdoctor check`` watches and for how long: one validated dataclass."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torchdoctor.errors import UserError
from torchdoctor.inputs import absolute_path


@dataclass(frozen=True)
class CheckOptions:
    """The effective ``check`` configuration, recorded in every ``run.json``."""

    warmup_steps: int = 5
    """Steps run before profiling starts; they absorb torch.compile and allocator warm-up."""
    profile_steps: int = 5
    """Steps recorded by the profiler after the warm-up."""
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
    def last_profiled_step(self) -> int:
        """Number (1-based) of the last profiled step."""
        return self.warmup_steps + self.profile_steps

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``run.json``."""
        return dataclasses.asdict(self)
