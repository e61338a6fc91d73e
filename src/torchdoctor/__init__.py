"""torchdoctor: find what makes PyTorch slow on a GPU, apply the fix, prove it.

Importing the package is cheap: the runtime (which needs torch) loads on first use of
``torchdoctor.Runtime``, so ``torchdoctor analyze`` never pays torch's import time.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
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


__all__ = ["Runtime", "__version__", "step", "workload"]
