"""Exit statuses and the one error path every command goes through.

| status | meaning |
|---|---|
| 0 | done (``compare``: no gate, or the gate passed) |
| 1 | ``compare``: the gate failed (NEW is slower); ``check``: the script's own status |
| 2 | bad input or usage: one line on standard error says what is wrong |
| 3 | an internal error (a torchdoctor bug): one line on standard error |
| 124 | ``check --timeout``: the script was stopped at the limit |
| 130 | interrupted (Ctrl-C), 143: terminated (SIGTERM) |

``check`` exits with the script's own status, so a script's exit 2 or 3 reads the same as
torchdoctor's; its report says which it was. When a signal N ended the script (a segfault,
SIGKILL, SIGTERM, Ctrl-C), ``check``'s process ends by signal N once the report is out
(``end_by_signal``; a shell shows 128 + N), as the script's own process did.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

from torchdoctor.errors import UserError
from torchdoctor.terminal import clean_field

EXIT_OK = 0
EXIT_SLOWER = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
EXIT_BROKEN_PIPE = 141  # what a shell shows for a writer whose reader went away (128 + SIGPIPE)

F = TypeVar("F", bound=Callable[..., Any])
console_script = False
"""True in the console script (``torchdoctor`` / ``python -m``), never under a test runner that
calls a command in-process: ``check`` forks a watching parent only then."""


def say(line: str) -> None:
    """Write one line to standard error (control characters escaped, never raising)."""
    text = " ".join(clean_field(part) for part in line.splitlines()) + "\n"
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):
        pass


def fail(message: str, status: int = EXIT_BAD_INPUT) -> NoReturn:
    """``torchdoctor: error: MESSAGE`` on standard error, then exit with ``status``."""
    say(f"torchdoctor: error: {message}")
    sys.exit(status)


def internal(exc: BaseException, when: str = "") -> NoReturn:
    """One line for a torchdoctor bug, then exit 3 (``TORCHDOCTOR_DEBUG=1`` re-raises)."""
    if os.environ.get("TORCHDOCTOR_DEBUG"):
        raise exc
    where = f" {when}" if when else ""
    say(
        f"torchdoctor: internal error{where}: {type(exc).__name__}: {_text(exc)} "
        "(set TORCHDOCTOR_DEBUG=1 for the traceback)"
    )
    sys.exit(EXIT_INTERNAL)


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:500]
    except Exception:  # a str() that itself fails (deep recursion): the type is enough
        return "(no message)"


def broken_pipe() -> NoReturn:
    """The reader of standard output went away: stop quietly, as ``cat`` would."""
    try:  # Python would otherwise complain while flushing at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, AttributeError, ValueError):
        pass
    os._exit(EXIT_BROKEN_PIPE)


def end_by_signal(signum: int) -> NoReturn:
    """End this process by ``signum`` (``check``'s watching parent, once the report is out,
    when that signal ended the script): a supervisor (torchrun's agent, Slurm, a CI runner, a
    shell) tells a signal death from an exit status, so check's process dies as the script did.

    Standard output and error are flushed first, the core dump is turned off (the script's own
    crash is the one that matters; a core of this process would only mislead), faulthandler is
    disabled and the signal's default action restored and unblocked, then the signal is raised.
    A signal whose default action does not end a process leaves with ``128 + signum``.
    """
    import faulthandler
    import resource
    import signal

    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.flush()
    with contextlib.suppress(Exception):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    faulthandler.disable()
    with contextlib.suppress(Exception):  # SIGKILL and SIGSTOP take no handler
        signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(Exception):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    with contextlib.suppress(Exception):
        signal.raise_signal(signum)
    os._exit(128 + signum)


def guarded(func: F) -> F:
    """Run a command body: a UserError becomes one line and exit 2, a broken pipe a quiet exit,
    anything else one line and exit 3 (``TORCHDOCTOR_DEBUG=1`` re-raises)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import warnings

        # numpy's overflow and invalid-value warnings on odd input are noise on a terminal
        # (the numbers they concern are reported, or the input refused, on their own).
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            return func(*args, **kwargs)
        except UserError as exc:
            if os.environ.get("TORCHDOCTOR_DEBUG"):
                raise
            fail(str(exc), exc.exit_code)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BrokenPipeError:
            broken_pipe()
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                broken_pipe()
            internal(exc)
        except MemoryError as exc:
            internal(exc, "(out of memory)")
        except Exception as exc:  # a bug: one line, not a traceback
            internal(exc)

    return wrapper  # type: ignore[return-value]


def check_stdout() -> None:
    """Refuse to start when standard output is closed (``cmd >&-``): the report goes there."""
    stream = sys.stdout
    if stream is not None:
        try:
            fd = stream.fileno()
        except (OSError, ValueError, AttributeError):
            return  # not a file descriptor (a test runner's buffer)
        try:
            os.fstat(fd)
            return
        except OSError:
            pass
    fail("standard output is closed; torchdoctor writes its report there")


class OneLineErrors:
    """A click command mixin: usage errors as one line (``torchdoctor: error: ...``), exit 2.

    click prints a usage error as three lines (usage, a hint, the error); one line says the same
    and fits a CI log. ``--help`` and ``--version`` work as before.
    """

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        import click

        def run() -> Any:
            return super(OneLineErrors, self).main(  # type: ignore[misc]
                args, prog_name, complete_var, False, windows_expand_args, **extra
            )

        if not standalone_mode:
            return run()
        check_stdout()
        try:
            rv = run()
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            hint = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
            fail(f"{exc.format_message()}{hint}", exc.exit_code)
        except click.ClickException as exc:
            fail(exc.format_message(), exc.exit_code)
        except click.exceptions.Abort:
            say("torchdoctor: aborted")
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            broken_pipe()
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                broken_pipe()
            raise
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)
