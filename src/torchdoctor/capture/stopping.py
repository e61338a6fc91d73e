"""Endings that come from outside the script: SIGTERM, ``--timeout``, and forks of the script.

SIGTERM is what ``timeout``, CI cancellation, Slurm and torchrun send; by default it kills the
process at once and the run folder stays empty. During a watched run it raises ``Terminated``
in the main thread instead, which ends the script as Ctrl-C does: its ``finally`` blocks run
and the steps measured so far are reported (exit status 143, as a shell shows a SIGTERM).
``--timeout`` raises ``TimedOut`` the same way once the time is up (exit status 124, as
``timeout`` has). Both only where the script has not installed a SIGTERM handler of its own:
then the script's handler decides, as it would without us.

A script that forks (``os.fork``, multiprocessing's fork start method) gets a child that
inherits the whole session; in the child the session goes quiet, so the child never counts
steps, never stops, never writes the parent's run folder. A profiler recording at the fork is
stopped and its window discarded first: torch's profiler does not survive a fork (the parent
crashes at exit, or the child hangs), and the script must run as it would without us.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from torchdoctor.exits import EXIT_TERMINATED, EXIT_TIMEOUT


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived during the watched run."""


class TimedOut(KeyboardInterrupt):
    """``--timeout`` expired during the watched run."""


class StopSignals:
    """Installs the SIGTERM handler and the timeout for one watched run (main thread only)."""

    def __init__(self, timeout_s: float | None, watched: bool = False) -> None:
        self.timeout_s = timeout_s
        self.watched = watched
        """Under a watching parent: SIGTERM stays ignored after the run (a second one, from the
        job and the parent both, must not cut the report short; the parent kills if need be)."""
        self.timed_out = False
        self.fired = False
        self._installed = False
        self._timer: threading.Timer | None = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, self._on_sigterm)
                self._installed = True
        if self.timeout_s:
            self._timer = threading.Timer(self.timeout_s, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if self.fired:
            return  # a second SIGTERM (sent to the job and forwarded) must not cut the cleanup
        self.fired = True
        raise TimedOut() if self.timed_out else Terminated()

    def _expire(self) -> None:
        import _thread

        self.timed_out = True
        # Through our SIGTERM handler when it is still in place, else as a Ctrl-C; a real
        # signal to the main thread, so a blocking call there (a sleep, a read) returns.
        ours = self._installed and signal.getsignal(signal.SIGTERM) == self._on_sigterm
        signum = signal.SIGTERM if ours else signal.SIGINT
        main = threading.main_thread().ident
        try:
            signal.pthread_kill(main, signum)  # type: ignore[arg-type]
        except (AttributeError, OSError, TypeError):
            _thread.interrupt_main(signum)

    def uninstall(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._installed:
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                    after = signal.SIG_IGN if self.watched else signal.SIG_DFL
                    signal.signal(signal.SIGTERM, after)
            self._installed = False

    def outcome(self, exc: BaseException) -> tuple[str, int]:
        """(status, exit code) for a KeyboardInterrupt that ended the script."""
        if isinstance(exc, TimedOut) or self.timed_out:
            return "timeout", EXIT_TIMEOUT
        if isinstance(exc, Terminated):
            return "terminated", EXIT_TERMINATED
        return "interrupted", 130


_in_child: list[Callable[[], None]] = []
_before: list[Callable[[], None]] = []


def _run_all(callbacks: list[Callable[[], None]]) -> None:
    for callback in list(callbacks):
        with contextlib.suppress(Exception):
            callback()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=lambda: _run_all(_before), after_in_child=lambda: _run_all(_in_child)
    )


def on_fork(before: Callable[[], None], in_child: Callable[[], None]) -> Callable[[], None]:
    """Call ``before`` in this process just before each fork from now on, and ``in_child`` in
    each child; returns the function that stops both."""
    _before.append(before)
    _in_child.append(in_child)

    def stop() -> None:
        for registry, callback in ((_before, before), (_in_child, in_child)):
            with contextlib.suppress(ValueError):
                registry.remove(callback)

    return stop
