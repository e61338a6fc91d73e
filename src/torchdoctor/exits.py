"""Exit statuses and the one error path every command goes through.

| status | meaning |
|---|---|
| 0 | done (``compare``: no gate, or the gate passed) |
| 1 | ``compare``: the gate failed (NEW is slower); ``check``: the script's own status |
| 2 | bad input or usage: one line on standard error says what is wrong |
| 3 | an internal error (a torchdoctor bug): one line on standard error |
| 74 | an output could not be written (standard output or a file: a full disk, a quota, an I/O error): one line naming it |
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
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

from torchdoctor.errors import OutputError, UserError
from torchdoctor.terminal import clean_field

EXIT_OK = 0
EXIT_SLOWER = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
EXIT_BROKEN_PIPE = 141  # what a shell shows for a writer whose reader went away (128 + SIGPIPE)
EXIT_OUTPUT = OutputError.exit_code  # 74, sysexits.h's EX_IOERR: an output could not be written
STDOUT = "standard output"
# A write that fails with one of these is the machine's state (space, quota, a read-only or
# failing disk), whatever torchdoctor was writing.
_ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS})

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


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """A ``UserError`` raised inside is ``fail``: one line and its status (2, bad input). Only
    that: ``check`` and ``fix`` run the user's script in this process, and its own errors are
    its report's."""
    try:
        yield
    except UserError as exc:
        fail(str(exc), exc.exit_code)


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
    _detach_stdout()
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


def _stdout_failed(exc: OSError) -> bool:
    """True when standard output is what failed: it cannot flush what it still buffers, it
    refuses even an empty write (``/dev/full``), or ``exc`` is ENOSPC and standard output is a
    file on a file system with no free block. An OSError carries no stream, so these probes
    tell one; the files torchdoctor writes name themselves (``OutputError``)."""
    stream = sys.stdout
    if stream is None:
        return False
    try:
        stream.flush()
    except OSError:
        return True
    except ValueError:  # closed
        return False
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):  # not a file (a test runner's buffer)
        return False
    try:
        os.write(fd, b"")  # only run after a failure: nothing is written to a healthy stream
    except OSError:
        return True
    try:
        if exc.errno != errno.ENOSPC or not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        vfs = os.fstatvfs(fd)
    except OSError:
        return False
    return (vfs.f_bavail if os.geteuid() else vfs.f_bfree) == 0


def failed_output(exc: OSError) -> str | None:
    """Which output ``exc`` failed to write (``standard output``, or the file it names), or
    None when it is no failed write of an output (then it is a torchdoctor bug)."""
    if exc.errno == errno.EPIPE:
        return None  # a reader that went away: broken_pipe()
    if _stdout_failed(exc):
        return STDOUT
    if exc.errno in _ENVIRONMENT_ERRNOS:
        return str(exc.filename) if exc.filename else "an output"
    return None


def _detach_stdout() -> None:
    # What a failed or closed stream still buffers goes to /dev/null at exit, where Python
    # would otherwise print "Exception ignored" and exit 120.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, AttributeError, ValueError):
        pass


def tell_output_failure(what: str, exc: BaseException) -> None:
    """``torchdoctor: error: cannot write WHAT: REASON`` on standard error; a failed standard
    output is detached (what it buffers goes nowhere, quietly)."""
    reason = getattr(exc, "strerror", None) or _text(exc)
    say(f"torchdoctor: error: cannot write {'to ' if what == STDOUT else ''}{what}: {reason}")
    if what == STDOUT:
        _detach_stdout()


def told_output_failure(exc: BaseException) -> bool:
    """Tell in one line the output ``exc`` failed to write, if that is what it is (``check``
    keeps the script's status, then)."""
    what = failed_output(exc) if isinstance(exc, OSError) else None
    if what is not None:
        tell_output_failure(what, exc)
    return what is not None


def output_failed(what: str, exc: BaseException, status: int = EXIT_OUTPUT) -> NoReturn:
    """``tell_output_failure``, then exit ``status`` (74 unless a caller keeps a status of its
    own, e.g. ``check``'s script's)."""
    tell_output_failure(what, exc)
    sys.exit(status)


def end_if_output_failed(exc: OSError) -> None:
    """End here when ``exc`` is about an output: a reader that went away is a quiet exit 141, a
    failed write of an output (standard output on a full device, a file on a full disk) one
    line naming it and exit 74. Returns when it is neither (then it is a torchdoctor bug)."""
    if isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE:
        broken_pipe()
    what = failed_output(exc)
    if what is not None:
        output_failed(what, exc)


def flush_stdout(status: int = EXIT_OUTPUT) -> None:
    """Flush standard output while a failure can still be told in one line: a reader that went
    away is a quiet exit 141, a full or failing device ``output_failed`` (exit ``status``)."""
    stream = sys.stdout
    if stream is None:
        return
    try:
        stream.flush()
    except BrokenPipeError:
        broken_pipe()
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            broken_pipe()
        output_failed(STDOUT, exc, status)
    except ValueError:  # closed: nothing is waiting to be written
        pass


def guarded(func: F) -> F:
    """Run a command body: a UserError becomes one line and exit 2 (an OutputError 74), a broken
    pipe a quiet exit, a failed write of an output (standard output on a full device, a file on
    a full disk) one line naming it and exit 74, anything else one line and exit 3
    (``TORCHDOCTOR_DEBUG=1`` re-raises)."""

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
        except OSError as exc:
            end_if_output_failed(exc)
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
            flush_stdout()  # a full device fails here, while it can be told in one line
        except SystemExit as exc:  # a command's own status (check: the script's)
            flush_stdout(exc.code if isinstance(exc.code, int) and exc.code else EXIT_OUTPUT)
            raise
        except click.exceptions.Exit as exc:
            flush_stdout()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            hint = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
            fail(f"{exc.format_message()}{hint}", exc.exit_code)
        except click.ClickException as exc:
            fail(exc.format_message(), exc.exit_code)
        except click.exceptions.Abort:
            say("torchdoctor: aborted")
            sys.exit(EXIT_INTERRUPTED)
        except OSError as exc:
            end_if_output_failed(exc)
            raise
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)
