"""``torchdoctor tune``: measure configurations of a user's own workload and keep the fastest one
whose loss stays faithful to the fp32 eager reference.

Importing this package does not import torch: the parent process only plans trials, stores results
and renders them; every trial runs in its own child process (``torchdoctor.tune.worker``).
"""

from __future__ import annotations

from torchdoctor.tune.workload import Workload, workload

__all__ = ["Workload", "workload"]
