"""The run rules about the host still registered by hand (torch's warnings), run after
``run_rules.RULES`` and the family rules."""

from __future__ import annotations

from collections.abc import Callable

from torchdoctor.record.run import RunRecord
from torchdoctor.rules.cpu_rules import torch_warnings
from torchdoctor.rules.finding import Finding

HOST_RULES: tuple[Callable[[RunRecord], list[Finding]], ...] = (torch_warnings,)
