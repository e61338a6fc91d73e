"""Who allocated a block: the first user Python frame of its stack, and what kind of memory it is.

A snapshot stack lists frames innermost first: allocator C++ frames, then torch's Python, then the
user's code. The holder of an allocation is the first frame that is neither C++ nor a library
(``code_paths``: torch, an installed package, the standard library) nor inductor's generated
code. When an inductor ``call`` frame was crossed on the way, the memory belongs to the compiled
graph that the user frame runs ("compiled graph of model.py:41").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from torchdoctor.code_paths import code_paths

Category = Literal["activations", "parameters", "optimizer state", "gradients", "other"]

NO_STACK = "<no stack recorded>"
CPP_ONLY = "<C++ frames only>"
BACKWARD_THREAD = "backward (autograd engine thread)"

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


Frame = tuple[str, str, int]
"""(name, filename, line) of one stack frame."""


def frame_fields(frame: Any) -> Frame:
    """(name, filename, line) of a frame; a field of the wrong type (or a frame that is not a
    dict) reads as empty, so an odd value can neither fail the report nor run into ``str()``
    of a deeply nested structure."""
    if type(frame) is not dict:
        return ("", "", 0)
    name, filename, line = frame.get("name", ""), frame.get("filename", ""), frame.get("line", 0)
    return (
        name if type(name) is str else "",
        filename if type(filename) is str else "",
        line if type(line) is int and -(2**31) <= line < 2**31 else 0,
    )


def is_python(filename: str) -> bool:
    return filename.endswith(".py") or filename.startswith("<")


def is_inductor_call(frame: Frame) -> bool:
    return frame[0] == "call" and bool(_INDUCTOR_FILE.search(frame[1]))


def is_library(filename: str) -> bool:
    """Not the user's code (``code_paths``; a snapshot recorded on another machine is judged
    by the install layout its paths show)."""
    return not code_paths().is_user(filename)


def _short(frame: Frame) -> str:
    filename = (frame[1] or "?").rsplit("/", 1)[-1]
    return f"{filename}:{frame[2]} ({frame[0] or '?'})"


def holder_label(frames: Sequence[Frame]) -> str:
    """The first user Python frame as ``file.py:LINE (function)``, prefixed when compiled."""
    if not frames:
        return NO_STACK
    compiled = False
    for frame in frames:
        if not is_python(frame[1]):
            continue
        if is_inductor_call(frame):
            compiled = True
        elif not is_library(frame[1]):
            return f"compiled graph of {_short(frame)}" if compiled else _short(frame)
    if any("torch::autograd::Engine" in f[0] for f in frames):
        return BACKWARD_THREAD
    return CPP_ONLY


def category(frames: Sequence[Frame]) -> Category:
    """What the allocation holds, from the functions on its stack (first match wins).

    Optimizer ``step`` -> optimizer state; ``backward`` (Python or the autograd engine) ->
    gradients; module ``_apply``/``to``/``load_state_dict`` outside a forward -> parameters;
    module ``forward`` -> activations.
    """
    if any(n == "step" and "optim" in fn.lower() for n, fn, _ in frames):
        return "optimizer state"
    if any("backward" in n.lower() or "autograd::Engine" in n for n, _, _ in frames):
        return "gradients"
    in_forward = any(n in ("forward", "_call_impl") for n, fn, _ in frames if is_python(fn))
    if not in_forward and any(n in _PARAM_FUNCS for n, fn, _ in frames if is_python(fn)):
        return "parameters"
    if in_forward or any(is_inductor_call(f) for f in frames):
        return "activations"
    return "other"


def classify(frames: Any) -> Holder:
    """The holder of a stack: a list of frame dicts (anything else reads as no stack)."""
    fields = [frame_fields(f) for f in frames] if type(frames) is list else []
    return Holder(holder_label(fields), category(fields))
