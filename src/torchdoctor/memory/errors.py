"""Errors for snapshot files: each becomes one line on stderr and exit status 2."""

from __future__ import annotations

from torchdoctor.errors import UserError


class SnapshotError(UserError):
    """A file that cannot be read as a CUDA memory snapshot (bad, hostile or incomplete)."""


HISTORY_HINT = (
    "record it with torch.cuda.memory._record_memory_history(stacks='python') before the steps, "
    "or run `torchdoctor check --memory`"
)
