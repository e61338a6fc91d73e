"""The run rules about the host (CPU threads, torch's warnings, rare long steps, housekeeping
calls in the step, work beside the step), run after ``run_rules.RULES``."""

from __future__ import annotations

from collections.abc import Callable

from torchdoctor.record.run import RunRecord
from torchdoctor.rules.aside_rules import work_beside_step
from torchdoctor.rules.cpu_rules import cpu_oversubscribed, torch_warnings
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.step_rules import housekeeping_in_step, rare_long_steps

HOST_RULES: tuple[Callable[[RunRecord], list[Finding]], ...] = (
    cpu_oversubscribed,
    torch_warnings,
    rare_long_steps,
    housekeeping_in_step,
    work_beside_step,
)
