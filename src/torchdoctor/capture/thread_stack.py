"""Another thread's stack, read in one tight walk.

A sampler thread that follows ``f_back`` through a thread that is running can meet a frame the
interpreter is still setting up or tearing down; on CPython 3.11 that has crashed sampling
profilers (sentry-python #2386 and #6119, ddtrace #13567: segfaults in ``f_back`` from a
sampling thread). The walk here does nothing between two ``f_back`` reads but keep the code
object and the line number, so the window in which the sampled thread can run is a few
bytecodes, and every frame is dropped before the caller looks at file names, libraries or
qualified names. What it returns holds no frame.

While dynamo compiles a frame the thread's frames are not walked at all: a compilation holds
a frame dynamo intercepted before it ran and creates and drops frames of its own for seconds,
and a walk from the sampler during one crashed a test run (CPython 3.11.7, in ``f_back``).
Dynamo's compile callbacks run on the compiling thread, which reads its own stack safely:
``hold_own_stack`` keeps it, and ``raw_stack`` returns that copy until ``release_own_stack``.
"""

from __future__ import annotations

import sys
import threading
from types import CodeType, FrameType

RawStack = list[tuple[CodeType, int]]
"""(code, line) pairs, innermost first."""

MAX_FRAMES = 2048
"""Deeper stacks (runaway recursion) are cut here; the outermost frames are lost."""


def frame_stack(frame: FrameType | None, limit: int = MAX_FRAMES) -> RawStack:
    """``frame`` and its callers as (code, line), innermost first."""
    out: RawStack = []
    append = out.append
    try:
        while frame is not None and len(out) < limit:
            append((frame.f_code, frame.f_lineno or 0))
            frame = frame.f_back
    finally:
        del frame
    return out


_held: dict[int, tuple[int, RawStack]] = {}
"""Per thread ident: (nesting depth, the stack it held)."""


def hold_own_stack() -> None:
    """The calling thread is about to run code no other thread may walk (dynamo compiling a
    frame): keep its stack as it is now for the samplers; nested holds keep the first one."""
    ident = threading.get_ident()
    depth, stack = _held.get(ident, (0, None))
    if stack is None:
        stack = frame_stack(sys._getframe(1))  # our own thread: safe
    _held[ident] = (depth + 1, stack)


def release_own_stack() -> None:
    """End the calling thread's innermost ``hold_own_stack``."""
    ident = threading.get_ident()
    depth, stack = _held.get(ident, (0, []))
    if depth <= 1:
        _held.pop(ident, None)
    else:
        _held[ident] = (depth - 1, stack)


def release_all() -> None:
    """Let every held stack go (the watch ends)."""
    _held.clear()


def raw_stack(ident: int | None, limit: int = MAX_FRAMES) -> RawStack | None:
    """Thread ``ident``'s stack as (code, line), innermost first; None when it has ended. A
    thread that holds its stack (``hold_own_stack``) is never walked: its held copy is read."""
    if ident is None:
        return None
    held = _held.get(ident)
    if held is not None:
        return list(held[1][:limit])
    frame = sys._current_frames().get(ident)
    if frame is None:
        return None
    try:
        return frame_stack(frame, limit)
    finally:
        del frame
