"""A guest never harms the host: torchdoctor's hooks, patches, callbacks and samplers run
inside someone else's training job, so an error of ours is caught and recorded as a note, and
the user's program goes on as it would have without us.

- ``note(where, exc)`` records one of our failures (bounded; the first few of each kind).
- ``guarded(where)`` wraps a bookkeeping function so that it never raises (``StopScript``,
  a ``BaseException``, still ends the script on purpose).
- ``remove_hook(handle)`` removes a hook only where that is safe. ``Optimizer.step`` iterates
  its global post-hooks live (``for hook in chain(..., _global_optimizer_post_hooks.values())``),
  so deleting an entry while that loop runs ("OrderedDict mutated during iteration") crashes
  the user's step. Inside ``optimizer.step`` the hook is replaced by a no-op under the same key
  (which changes no size) and deleted at the next safe point.
- ``active_session()``: the one ``check`` session of this process, so that a framework
  callback started under ``check`` steps aside instead of installing a second set of hooks.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_MAX_NOTES = 50
_MAX_PER_PLACE = 3
_notes: list[str] = []
_counts: dict[str, int] = {}
_deferred: list[Any] = []
_active: Any = None


def note(where: str, exc: BaseException) -> None:
    """Record that our code failed at ``where``; the user's program is not affected."""
    n = _counts.get(where, 0) + 1
    _counts[where] = n
    if n <= _MAX_PER_PLACE and len(_notes) < _MAX_NOTES:
        _notes.append(f"{where}: {type(exc).__name__}: {exc}"[:300])


def read_or_none(get: Callable[[], Any]) -> Any:
    """``get()``, or None where it raises: a setting this torch lacks, or refuses to read."""
    try:
        return get()
    except Exception:
        return None


def notes() -> list[str]:
    """The notes recorded since the last ``reset``, with a count for repeated places."""
    out = list(_notes)
    for where, n in _counts.items():
        if n > _MAX_PER_PLACE:
            out.append(f"{where}: {n - _MAX_PER_PLACE} more")
    return out


def reset() -> None:
    """Forget the notes (a new run starts)."""
    _notes.clear()
    _counts.clear()


def guarded(where: str) -> Callable[[F], F]:
    """Decorator: exceptions (not ``BaseException``) from the function become a note and the
    function returns None."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                note(where, exc)
                return None

        return inner  # type: ignore[return-value]

    return wrap


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _in_optimizer_step(frame: Any) -> bool:
    """True when ``frame``'s stack runs inside ``Optimizer.step``'s hook-calling wrapper."""
    try:
        from torch.optim import optimizer
    except Exception:
        return False
    target = optimizer.__file__
    depth = 0
    while frame is not None and depth < 500:
        code = frame.f_code
        if code.co_name == "wrapper" and code.co_filename == target:
            return True
        frame = frame.f_back
        depth += 1
    return False


def remove_hook(handle: Any) -> None:
    """Remove a ``RemovableHandle``'s hook now, or, while an optimizer step runs, neutralise it
    (a no-op under the same key) and remove it at the next ``flush_deferred``. Never raises."""
    if handle is None:
        return
    try:
        if not _in_optimizer_step(sys._getframe(1)):
            handle.remove()
            return
        for ref in (getattr(handle, "hooks_dict_ref", None),):
            hooks = ref() if ref is not None else None
            if hooks is not None and handle.id in hooks:
                hooks[handle.id] = _noop
        _deferred.append(handle)
    except Exception as exc:
        note("removing a hook", exc)


def flush_deferred() -> None:
    """Remove hooks whose removal was deferred (call where no optimizer step runs)."""
    while _deferred:
        handle = _deferred.pop()
        try:
            handle.remove()
        except Exception as exc:
            note("removing a deferred hook", exc)


def set_active(session: Any) -> None:
    """Mark ``session`` as this process's watching session (``None`` clears it)."""
    global _active
    _active = session


def active_session() -> Any:
    """The session watching this process now, or None."""
    return _active
