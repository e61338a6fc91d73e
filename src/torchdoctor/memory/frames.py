"""Who allocated a block: the first user Python frame of its stack, and what kind of memory it is.

A snapshot stack lists frames innermost first: allocator C++ frames, then torch's Python, then the
user's code. The holder of an allocation is the first frame that is neither C++ nor a library
(torch, site-packages) nor inductor's generated code. When an inductor ``call`` frame was crossed on
the way, the memory belongs to the compiled graph that the user frame runs ("compiled graph of
model.py:41").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Category = Literal["activations", "parameters", "optimizer state", "gradients", "other"]
CATEGORIES: tuple[Category, ...] = (
    "activations",
    "parameters",
    "optimizer state",
    "gradients",
    "other",
)

NO_STACK = "<no stack recorded>"
CPP_ONLY = "<C++ frames only>"
BACKWARD_THREAD = "backward (autograd engine thread)"

_LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "/lib/python3", "/torch/", "<frozen ")
# Inductor writes its output code to <cache>/<2 chars>/c<hash>.py (default cache: torchinductor_*).
_INDUCTOR_FILE = re.compile(r"(torchinductor|/[a-z0-9]{2}/c[a-z0-9]{20,}\.py$)")
_PARAM_FUNCS = frozenset(
    {"_apply", "to", "cuda", "reset_parameters", "load_state_dict", "_load_from_state_dict"}
)


@dataclass(frozen=True)
class Holder:
    """Where a block came from: ``label`` names the user frame, ``category`` what it holds."""

    label: str
    category: Category


def is_python(filename: str) -> bool:
    return filename.endswith(".py") or filename.startswith("<")


def is_inductor_call(frame: dict[str, Any]) -> bool:
    return frame.get("name") == "call" and bool(_INDUCTOR_FILE.search(frame.get("filename", "")))


def is_library(filename: str) -> bool:
    return any(part in filename for part in _LIBRARY_PARTS)


def _short(frame: dict[str, Any]) -> str:
    filename = str(frame.get("filename", "?")).rsplit("/", 1)[-1]
    return f"{filename}:{frame.get('line', 0)} ({frame.get('name', '?')})"


def holder_label(frames: Sequence[dict[str, Any]]) -> str:
    """The first user Python frame as ``file.py:LINE (function)``, prefixed when compiled."""
    if not frames:
        return NO_STACK
    compiled = False
    for frame in frames:
        filename = str(frame.get("filename", ""))
        if not is_python(filename):
            continue
        if is_inductor_call(frame):
            compiled = True
        elif not is_library(filename):
            return f"compiled graph of {_short(frame)}" if compiled else _short(frame)
    if any("torch::autograd::Engine" in str(f.get("name", "")) for f in frames):
        return BACKWARD_THREAD
    return CPP_ONLY


def category(frames: Sequence[dict[str, Any]]) -> Category:
    """What the allocation holds, from the functions on its stack (first match wins).

    Optimizer ``step`` -> optimizer state; ``backward`` (Python or the autograd engine) ->
    gradients; module ``_apply``/``to``/``load_state_dict`` outside a forward -> parameters;
    module ``forward`` -> activations.
    """
    names = [(str(f.get("name", "")), str(f.get("filename", ""))) for f in frames]
    if any(n == "step" and "optim" in fn.lower() for n, fn in names):
        return "optimizer state"
    if any("backward" in n.lower() or "autograd::Engine" in n for n, _ in names):
        return "gradients"
    in_forward = any(n in ("forward", "_call_impl") for n, fn in names if is_python(fn))
    if not in_forward and any(n in _PARAM_FUNCS for n, fn in names if is_python(fn)):
        return "parameters"
    if in_forward or any(is_inductor_call(f) for f in frames):
        return "activations"
    return "other"


def classify(frames: Sequence[dict[str, Any]]) -> Holder:
    return Holder(holder_label(frames), category(frames))
