"""The torchdoctor runtime: apply precision, compile, data and distributed settings in a user's
own training loop. ``Runtime`` is the entry point; the modules beside it hold one concept each."""

from __future__ import annotations

from torchdoctor.runtime.compile_guard import RecompileError
from torchdoctor.runtime.meter import MeterSummary
from torchdoctor.runtime.runtime import Runtime

__all__ = ["MeterSummary", "RecompileError", "Runtime"]
