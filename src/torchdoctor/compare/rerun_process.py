"""One fresh process of one side of an interleaved rerun: spawn, bound, read its record.

The process runs ``rerun_child`` (the script under ``check``'s step clock, profiler off), which
writes its step times and clock instants to a JSON file; this module turns that record and the
wall time the parent saw into a ``RunCost``. Every failure of the script (an exception, a
non-zero exit, too few steps, a timeout, a crash) comes back as a ``ChildRun`` with a one-line
reason, never as an exception.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from torchdoctor.capture.timed_window import measured_step_ms
from torchdoctor.compare.cost import RunCost
from torchdoctor.compare.rerun_types import ChildRun, RerunOptions, RunStatus, Script, SideName

_STATUSES: frozenset[str] = frozenset(
    ("stopped", "completed", "exited", "error", "interrupted", "timeout", "crash")
)


def run_child(
    side: SideName,
    rnd: int,
    script: Script,
    options: RerunOptions,
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> ChildRun:
    """Run ``script`` once in a new process group and return what it measured.

    ``env`` adds variables to this process's environment; the process group goes on timeout
    (``options.timeout_s``) and after the script's end (workers a run leaked must not steal CPU
    from the next run). A run that went to its end (``options.full``) has its whole time,
    exit included, as the parent saw it.
    """
    with tempfile.TemporaryDirectory(prefix="td-rerun-") as tmp:
        result_path = Path(tmp) / "result.json"
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(_spec(script, options, result_path)))
        cmd = [sys.executable, "-m", "torchdoctor.compare.rerun_child", str(spec_path)]
        t_spawn = time.monotonic()
        # Own session: on timeout the whole group goes (DataLoader workers, compile workers).
        proc = subprocess.Popen(
            cmd,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            _, err = proc.communicate(timeout=options.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            wall = time.monotonic() - t_spawn
            why = f"ran past {options.timeout_s:.0f} s"
            return ChildRun(side, rnd, "timeout", -1, why, wall, None)
        wall = time.monotonic() - t_spawn
        _kill_group(proc)
        run = _read(side, rnd, proc.returncode, result_path, err, t_spawn, wall, options)
    return _with_job(run)


def _spec(script: Script, options: RerunOptions, result: Path) -> dict[str, Any]:
    return {
        "script": os.path.abspath(script.path),
        "args": list(script.args),
        "warmup": options.warmup,
        "steps": options.steps,
        "full": options.full,
        "result_path": str(result),
    }


def _with_job(run: ChildRun) -> ChildRun:
    """A run that went to its end: its whole time is what the parent saw, exit included."""
    if run.cost is None or run.cost.job_steps is None:
        return run
    return replace(run, cost=replace(run.cost, job_s=run.wall_s))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _status(value: object) -> RunStatus:
    text = str(value)
    return text if text in _STATUSES else "crash"  # type: ignore[return-value]


def _read(
    side: SideName,
    rnd: int,
    returncode: int,
    path: Path,
    stderr: bytes,
    t_spawn: float,
    wall: float,
    options: RerunOptions,
) -> ChildRun:
    tail = " | ".join(stderr.decode("utf-8", "replace").strip().splitlines()[-3:])[:400]
    if not path.exists():
        why = f"exited with status {returncode} without a result"
        if returncode < 0:
            why = f"was killed by {signal.Signals(-returncode).name}"
        return ChildRun(side, rnd, "crash", -1, f"{why}: {tail}", wall, None)
    doc = json.loads(path.read_text(encoding="utf-8"))
    cost, why = cost_of(doc, t_spawn, t_spawn + wall, options.warmup, options.steps)
    status, code = _status(doc.get("status")), int(doc.get("code") or 0)
    if cost is None:
        exc = doc.get("exception") or tail
        why = f"{why} (the script {status}, status {code}{': ' + exc if exc else ''})"
    return ChildRun(side, rnd, status, code, why, wall, cost, doc)


def _startup_s(doc: dict[str, Any], t_spawn: float, warm: np.ndarray) -> float:
    """Everything before the steady window that is not a warm-up step: the interpreter, imports
    and the script's own set-up. Taken from the instant the warm-up ended, not from the clock's
    first step: when an optimizer step takes over from DataLoader batches as the step signal,
    the clock's first step starts at the first batch, and what ran before it would be lost."""
    start = doc.get("t_measure") or doc["t_begin"]
    return max(0.0, float(start) - t_spawn - float(np.sum(warm)) / 1000.0)


def cost_of(
    doc: dict[str, Any], t_spawn: float, t_exit: float, warmup: int, steps: int
) -> tuple[RunCost | None, str]:
    """A child's record as the run's costs (times on the parent's monotonic clock, seconds), or
    None and why (the script failed, too few steps, no step signal)."""
    step_ms = np.asarray(doc.get("step_ms") or [], dtype=np.float64)
    if doc.get("status") not in ("stopped", "completed") or (doc.get("code") or 0) != 0:
        return None, "failed"
    if len(step_ms) < warmup + 1:
        return None, (
            f"ran {len(step_ms)} steps, fewer than --warmup {warmup} + 1 (no optimizer step, "
            "DataLoader batch or torchdoctor.step() marker seen?)"
        )
    warm, steady = step_ms[:warmup], step_ms[warmup:]
    window = None
    t_measure, t_window_end = doc.get("t_measure"), doc.get("t_window_end")
    if doc.get("status") == "stopped" and t_measure is not None and t_window_end is not None:
        steady = steady[:steps]
        window = (float(t_window_end) - float(t_measure)) * 1e3 / len(steady)
        gpu = measured_step_ms(doc)  # the steps on the GPU's clock (CUDA events), as check's
        if gpu is not None and len(gpu) == len(steady):
            steady = np.asarray(gpu, dtype=np.float64)
    loaders = doc.get("loaders") or []
    batch = next((d.get("batch_size") for d in loaders if d.get("batch_size")), None)
    completed = doc.get("status") == "completed"
    return (
        RunCost(
            step_ms=steady,
            warmup_ms=warm,
            startup_s=_startup_s(doc, t_spawn, warm),
            # A stopped run exits with what a finished one holds (modules, threads, objects)
            exit_s=max(0.0, t_exit - float(doc["t_end"])),
            compile_s=float(doc.get("compile_s") or 0.0) or None,
            job_steps=len(step_ms) if completed else None,
            window_mean_ms=window,
            samples_per_step=float(batch) if batch else None,
        ),
        "",
    )
