"""Run a torchdoctor command on a hostile input as a child process under time and memory limits,
and check the contract: exit status, one line on standard error, no traceback."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    wall_s: float

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def env(**extra: str) -> dict[str, str]:
    """The environment a child needs to import this checkout's torchdoctor."""
    # TORCHDOCTOR_TEST_SRC runs the children on another src/ (an older commit's, to see a case
    # fail there).
    src = os.environ.get("TORCHDOCTOR_TEST_SRC", str(REPO / "src"))
    path = os.pathsep.join([src, str(REPO), os.environ.get("PYTHONPATH", "")])
    base = {k: v for k, v in os.environ.items() if k != "TORCHDOCTOR_DEBUG"}
    return {**base, "PYTHONPATH": path, "COLUMNS": "120", **extra}


def _limits(memory_mib: int | None, extra: Callable[[], None] | None) -> Callable[[], None]:
    def apply() -> None:
        if memory_mib is not None:
            # Address space, not resident memory: a reader that tries to allocate gigabytes for
            # a small file fails at once (MemoryError) instead of swapping the machine.
            size = memory_mib * MIB
            resource.setrlimit(resource.RLIMIT_AS, (size, size))
        if extra is not None:
            extra()

    return apply


def run(
    args: list[str],
    *,
    timeout_s: float = 60.0,
    memory_mib: int | None = 2048,
    preexec: Callable[[], None] | None = None,
    stdin: int | None = subprocess.DEVNULL,
    **env_extra: str,
) -> Ran:
    """``python -m torchdoctor ARGS`` with the limits; a timeout is a test failure."""
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "torchdoctor", *args],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            env=env(**env_extra),
            stdin=stdin,
            preexec_fn=_limits(memory_mib, preexec),
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"torchdoctor {args[:3]} ran past {timeout_s:.0f} s") from None
    return Ran(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def run_python(
    code: str, *args: str, timeout_s: float = 60.0, memory_mib: int | None = 2048
) -> Ran:
    """``python -c CODE ARGS`` with this checkout importable, under the limits."""
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env(),
            preexec_fn=_limits(memory_mib, None),
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"python -c ran past {timeout_s:.0f} s") from None
    return Ran(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def one_line_error(ran: Ran, status: int = 2, *needles: str) -> str:
    """Assert the bad-input contract: ``status``, one ``torchdoctor: error:`` line, no traceback."""
    assert ran.code == status, (ran.code, ran.stderr[-2000:])
    assert "Traceback" not in ran.stderr, ran.stderr[-2000:]
    assert len(ran.lines) == 1, ran.stderr[-2000:]
    line = ran.lines[0]
    assert line.startswith("torchdoctor: error:"), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def strings(value: object) -> list[str]:
    """Every string in a decoded JSON document (keys and values)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (str(k), *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []
