"""How torchdoctor's processes end: by the script's signal (``check``)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchdoctor.commands.check.watcher import ending_signal


def _python(code: str, cwd: Path, core: bool = False) -> subprocess.CompletedProcess[str]:
    def allow_core() -> None:
        hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
        resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=allow_core if core else None,
    )


def test_end_by_signal_dies_by_the_signal_flushed_and_without_a_core(tmp_path: Path) -> None:
    """A handler of its own, faulthandler and a blocked mask in the way: the process still dies
    by SIGSEGV, after its buffered output, and leaves no core where one would be written."""
    control, ours = tmp_path / "control", tmp_path / "ours"
    control.mkdir()
    ours.mkdir()
    plain = _python("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", control, core=True)
    assert plain.returncode == -signal.SIGSEGV
    proc = _python(
        """
        import faulthandler, signal
        from torchdoctor.exits import end_by_signal
        faulthandler.enable()
        signal.signal(signal.SIGSEGV, lambda *a: print("handler ran"))
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGSEGV})
        print("the report")  # block-buffered into a pipe: lost unless flushed
        end_by_signal(signal.SIGSEGV)
        print("still alive")
        """,
        ours,
        core=True,
    )
    assert proc.returncode == -signal.SIGSEGV, proc.stderr
    assert proc.stdout == "the report\n"
    assert "Fatal Python error" not in proc.stderr  # faulthandler's dump
    if os.listdir(control):  # cores are written here: a plain SIGSEGV left one
        assert os.listdir(ours) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_end_by_signal_when_the_signal_is_ignored(tmp_path: Path, sig: signal.Signals) -> None:
    proc = _python(
        f"""
        import signal
        from torchdoctor.exits import end_by_signal
        if {int(sig)} != signal.SIGKILL:
            signal.signal({int(sig)}, signal.SIG_IGN)
        end_by_signal({int(sig)})
        """,
        tmp_path,
    )
    assert proc.returncode == -sig, proc.stderr


@pytest.mark.parametrize(
    ("code", "killed_for", "ended", "expected"),
    [
        (-signal.SIGSEGV, None, None, signal.SIGSEGV),  # died: the parent rebuilt the record
        (-signal.SIGKILL, None, "killed", signal.SIGKILL),
        (-signal.SIGKILL, "timeout", "timeout", None),  # check's own stop: exit 124
        (-signal.SIGKILL, "terminated", "terminated", signal.SIGTERM),  # stuck after SIGTERM
        (143, None, "terminated", signal.SIGTERM),  # SIGTERM stopped the script as an exception
        (130, None, "interrupted", signal.SIGINT),  # Ctrl-C: python ends by SIGINT
        (143, None, "exited", None),  # the script's own sys.exit(143)
        (130, None, None, None),  # no record to say why
        (0, None, "completed", None),
        (124, None, "timeout", None),
    ],
)
def test_which_signal_the_parent_ends_by(
    code: int, killed_for: str | None, ended: str | None, expected: int | None
) -> None:
    assert ending_signal(code, killed_for, ended) == expected
