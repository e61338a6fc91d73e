"""Shared helpers for the ``check`` end-to-end tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "check"
# Small windows keep each run to a few seconds on a 2-core CPU.
FAST = ["--warmup", "3", "--steps", "3"]


def _fast_steps() -> int:
    from torchdoctor.capture.options import CheckOptions

    after = CheckOptions(warmup_steps=3, profile_steps=3).schedule.after
    assert after is not None
    return after[1]


FAST_STEPS = _fast_steps()
"""Steps a FAST run takes before check stops the script on a CPU: 3 warm-up, 8 clean, the
profiler's own step, 3 profiled, 5 clean again (20)."""


@dataclass
class CheckRun:
    code: int
    stdout: str
    stderr: str
    folder: Path | None
    hooks_left: dict[str, int] = field(default_factory=dict)
    """Global module hooks the run left behind (an in-process run), per hook dict: the
    script's own or ours; removed again before the next test."""

    @property
    def report(self) -> dict[str, Any]:
        assert self.folder is not None, self.stderr
        return json.loads((self.folder / "report.json").read_text())

    @property
    def run(self) -> dict[str, Any]:
        assert self.folder is not None, self.stderr
        return json.loads((self.folder / "run.json").read_text())

    @property
    def top(self) -> dict[str, Any]:
        findings = self.report["findings"]
        assert findings, self.stdout
        return findings[0]


def _folder(out: Path) -> Path | None:
    folders = [p for p in out.iterdir() if p.is_dir()]
    return folders[0] if len(folders) == 1 else None


def check_inprocess(out: Path, script: Path | str, *args: str, opts: list[str] = FAST) -> CheckRun:
    """Run ``torchdoctor check`` in this process (no interpreter or torch start-up)."""
    from torchdoctor.commands.check.cli import check_command

    saved = _global_module_hooks()
    try:
        result = CliRunner().invoke(
            check_command, [*opts, "--out", str(out), str(script), *args], catch_exceptions=False
        )
        new = _new_hooks(saved)  # counted before they are removed
        left = {name: len(keys) for name, keys in new.items() if keys}
    finally:
        _restore_global_module_hooks(saved)
    return CheckRun(result.exit_code, result.stdout, result.stderr, _folder(out), left)


_HOOK_DICTS = (
    "_global_forward_pre_hooks",
    "_global_forward_hooks",
    "_global_backward_pre_hooks",
    "_global_backward_hooks",
)


def _global_module_hooks() -> dict[str, dict[Any, Any]]:
    from torch.nn.modules import module

    return {name: dict(getattr(module, name)) for name in _HOOK_DICTS}


def _new_hooks(saved: dict[str, dict[Any, Any]]) -> dict[str, list[Any]]:
    """The keys of each global hook dict that are not in ``saved``."""
    from torch.nn.modules import module

    return {
        name: [k for k in getattr(module, name) if k not in hooks] for name, hooks in saved.items()
    }


def _restore_global_module_hooks(saved: dict[str, dict[Any, Any]]) -> None:
    """A script run in this process may leave global module hooks of its own (the hostile-hooks
    case keeps one on purpose); the next test must not inherit them. Compiled frames of the
    script (guards on its ``__main__``) are dropped too."""
    import torch
    from torch.nn.modules import module

    for name, keys in _new_hooks(saved).items():
        live = getattr(module, name)
        for key in keys:
            del live[key]
    torch._dynamo.reset()


UNLISTED_OPTS = ["--warmup", "3", "--steps", "4"]


def unlisted_check(shared_check: Callable[..., CheckRun], script: Path) -> CheckRun:
    """``check`` of an ``examples/unlisted`` script (``--steps 40``, ``UNLISTED_OPTS``) in this
    process at its own intra-op thread count, made once per test run: the naming, control,
    loop-line and fused-compute tests read the same run. The test process's own objects are
    frozen meanwhile: late in a test run they are millions (modules, cached traces), and every
    ``gc.collect()`` of gc_every_step.py walked them all; frozen, a collection walks what the
    script made (its 60,000 samples), less than in its own process (torch's objects too)."""
    import gc

    sys.path.insert(0, str(script.parent))  # the scripts import their step timer
    gc.freeze()
    try:
        return shared_check(script, "--steps", "40", opts=UNLISTED_OPTS, threads=None)
    finally:
        gc.unfreeze()
        sys.path.remove(str(script.parent))


def check_subprocess(
    out: Path,
    script: Path | str,
    *args: str,
    opts: list[str] = FAST,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> CheckRun:
    """Run ``python -m torchdoctor check`` as a user would (``env``: variables set on top of
    this process's environment)."""
    cmd = [sys.executable, "-m", "torchdoctor", "check", *opts, "--out", str(out), str(script)]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.run(
        [*cmd, *args], capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO
    )
    return CheckRun(proc.returncode, proc.stdout, proc.stderr, _folder(out))
