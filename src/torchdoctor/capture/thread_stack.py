"""Another thread's stack, read in one tight walk.

A sampler thread that follows ``f_back`` through a thread that is running can meet a frame the
interpreter is still setting up or tearing down; on CPython 3.11 that has crashed sampling
profilers (sentry-python #2386 and #6119, ddtrace #13567: segfaults in ``f_back`` from a
sampling thread). The walk here does nothing between two ``f_back`` reads but keep the code
object and the line number, so the window in which the sampled thread can run is a few
bytecodes, and every frame is dropped before the caller looks at file names, libraries or
qualified names. What it returns holds no frame.
"""

from __future__ import annotations

import sys
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


def raw_stack(ident: int | None, limit: int = MAX_FRAMES) -> RawStack | None:
    """Thread ``ident``'s stack as (code, line), innermost first; None when it has ended."""
    if ident is None:
        return None
    frame = sys._current_frames().get(ident)
    if frame is None:
        return None
    try:
        return frame_stack(frame, limit)
    finally:
        del frame
