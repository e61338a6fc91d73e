"""One arm, once, in a fresh process: start it, bound it, read back what it measured.

The parent writes the arm's spec (JSON, ``result_path`` added) to a private folder and starts
``[*arm.argv, SPEC]`` in a session of its own; the child reads it (:func:`read_spec`) and writes
its result (:func:`write_result`, atomically). Whatever happens comes back as a
:class:`ChildExit`, never as an exception. The child's process group goes when it ends (workers
a run leaked must not steal CPU from the next run), on timeout and when the parent is
interrupted (the group is in its own session: it never sees the terminal's Ctrl-C).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Ending = Literal["result", "timeout", "signal", "no-result"]
"""It wrote a result; it ran past its time; a signal killed it; it exited without a result."""


@dataclass(frozen=True)
class Arm:
    """One variant and how to start it."""

    name: str
    argv: tuple[str, ...]
    """The command; the spec file's path is appended."""
    spec: Mapping[str, Any] = field(default_factory=dict)
    """What the child reads (JSON-serialisable); ``result_path`` is added."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to this process's environment."""
    cwd: str | None = None
    """The child's working folder (None: this process's)."""


@dataclass(frozen=True)
class ChildExit:
    """What one process of one arm left."""

    ending: Ending
    returncode: int
    """The process's exit status (negative: the signal that killed it)."""
    result: dict[str, Any] | None
    """The child's result (None unless ``ending`` is ``result``)."""
    output: str
    """The end of what the child printed (stderr; stdout too when asked)."""
    t_spawn: float
    """``time.monotonic()`` just before the start (the child may read the same clock)."""
    wall_s: float
    """From the start to the process's end, as the parent saw it."""
    why: str = ""
    """Why there is no result, in one line (empty when there is)."""

    def tail(self, lines: int = 3, chars: int = 400) -> str:
        """The last ``lines`` lines the child printed, joined by `` | ``."""
        return " | ".join(self.output.strip().splitlines()[-lines:])[:chars]


def run_child(arm: Arm, timeout_s: float, *, stdout: bool = False) -> ChildExit:
    """Run ``arm`` once in a new session and return what it left; never raises for the child's
    sake (an interrupt of this process kills the child's group, then propagates).

    ``stdout``: keep the child's standard output with its errors (else it is discarded).
    """
    with tempfile.TemporaryDirectory(prefix="td-arm-") as tmp:
        result_path, log_path = Path(tmp) / "result.json", Path(tmp) / "output.log"
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps({**arm.spec, "result_path": str(result_path)}))
        with log_path.open("wb") as log:
            t_spawn = time.monotonic()
            proc = subprocess.Popen(
                [*arm.argv, str(spec_path)],
                env={**os.environ, **arm.env},
                cwd=arm.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log if stdout else subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
            finally:
                timed_out = proc.poll() is None
                _kill_group(proc)
        wall = time.monotonic() - t_spawn
        output = _last_bytes(log_path)
        if timed_out:
            why = f"no result after {timeout_s:.0f} s"
            return ChildExit("timeout", -1, None, output, t_spawn, wall, why)
        return _ended(proc.returncode, result_path, output, t_spawn, wall)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    # A process the kernel cannot reap within 10 s is left behind rather than hanging the caller.
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _last_bytes(path: Path, limit: int = 16384) -> str:
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - limit))
        return f.read().decode("utf-8", "replace")


def _ended(code: int, result: Path, output: str, t_spawn: float, wall: float) -> ChildExit:
    if result.is_file():
        try:
            doc = json.loads(result.read_text(encoding="utf-8"))
        except (ValueError, OSError) as exc:
            return ChildExit(
                "no-result", code, None, output, t_spawn, wall, f"unreadable result: {exc}"
            )
        if isinstance(doc, dict):
            return ChildExit("result", code, doc, output, t_spawn, wall)
    if code < 0:
        name = signal.Signals(-code).name
        hint = " (the kernel's out-of-memory killer sends SIGKILL)" if name == "SIGKILL" else ""
        return ChildExit("signal", code, None, output, t_spawn, wall, f"killed by {name}{hint}")
    why = f"exited with status {code} without a result"
    return ChildExit("no-result", code, None, output, t_spawn, wall, why)


def read_spec(argv: list[str]) -> dict[str, Any]:
    """In the child: the spec the parent wrote (the command's last argument)."""
    doc: dict[str, Any] = json.loads(Path(argv[-1]).read_text(encoding="utf-8"))
    return doc


def write_result(spec: Mapping[str, Any], doc: Mapping[str, Any]) -> None:
    """In the child: the result, where the parent reads it, written whole or not at all."""
    target = Path(spec["result_path"])
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc), encoding="utf-8")
    os.replace(tmp, target)
