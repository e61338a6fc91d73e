"""The user's line that called into torch: the first frame, walking out from a wrapper, whose
file is the user's (``CodePaths``: not torch, torchdoctor, an installed package or the
standard library)."""

from __future__ import annotations

import sys
from typing import Any

from torchdoctor.code_paths import CodePaths


def user_site(paths: CodePaths, skip: int = 1, constructing: type | None = None) -> str | None:
    """``"file:line"`` of the innermost user frame above the caller's ``skip`` frames; None
    when no frame is the user's. With ``constructing`` (a class), the ``__init__`` frames of
    instances of it are passed over: a user's ``nn.Module`` subclass calling ``super().__init__``
    is not the construction site, the line that built the object is."""
    frame: Any = sys._getframe(skip + 1)
    depth = 0
    while frame is not None and depth < 400:
        code = frame.f_code
        if paths.is_user(code.co_filename) and not (
            constructing is not None and _constructs(frame, constructing)
        ):
            return f"{code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
        depth += 1
    return None


def _constructs(frame: Any, cls: type) -> bool:
    code = frame.f_code
    if code.co_name != "__init__" or not code.co_varnames or code.co_varnames[0] != "self":
        return False
    return isinstance(frame.f_locals.get("self"), cls)
