"""torchdoctor: find what makes PyTorch slow on a GPU, apply the fix, prove it.

Importing the package is cheap: the runtime (which needs torch) loads on first use of
``torchdoctor.Runtime``, so ``torchdoctor analyze`` never pays torch's import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load on first use
    from torchdoctor.api import CheckResult, Report, analyze, check
    from torchdoctor.runtime import Runtime

from torchdoctor._version import __version__

_LAZY = {
    "analyze": ("torchdoctor.api", "analyze"),
    "check": ("torchdoctor.api", "check"),
    "Report": ("torchdoctor.api", "Report"),
    "CheckResult": ("torchdoctor.api", "CheckResult"),
    "Runtime": ("torchdoctor.runtime", "Runtime"),
    "step": ("torchdoctor.capture.markers", "step"),
    "workload": ("torchdoctor.tune.workload", "workload"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'torchdoctor' has no attribute {name!r}")


__all__ = [
    "CheckResult",
    "Report",
    "Runtime",
    "__version__",
    "analyze",
    "check",
    "step",
    "workload",
]
