"""``torchdoctor fix SCRIPT`` on a script that fails before its first step: fix says so, with the
script's status and exception, and exits with that status (as ``check`` does), instead of
"nothing to change" and 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from torchdoctor.cli import cli
from torchdoctor.fix.render import ScriptFailure
from torchdoctor.record.run import RunRecord

RAISES = """import torch
x = torch.ones(2)
raise RuntimeError("dataset path /nope is missing")
"""
EXITS_3 = """import sys
import torch
sys.exit(3)
"""


def _fix(tmp: Path, source: str, *extra: str) -> tuple[int, str, str]:
    script = tmp / "train.py"
    script.write_text(source)
    out = tmp / "runs"
    args = ["fix", "--warmup", "1", "--steps", "1", "--out", str(out), *extra, str(script)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_script_raising_before_its_first_step(here: Path) -> None:
    code, stdout, stderr = _fix(here, RAISES)
    assert code == 1
    assert stdout == ""  # no patch
    assert "nothing to change" not in stderr
    assert "the script failed before its first step (exit: error, code 1)" in stderr
    assert "RuntimeError: dataset path /nope is missing" in stderr.splitlines()[-1]


def test_a_script_exiting_3_exits_3_with_its_status_in_the_json(here: Path) -> None:
    code, stdout, stderr = _fix(here, EXITS_3, "--json")
    assert code == 3
    doc = json.loads(stdout)
    assert doc["script_failed"] == {
        "status": "exited",
        "code": 3,
        "exception": "SystemExit: 3",
        "steps": 0,
    }
    assert doc["changes"] == []
    assert "(exit: exited, code 3)" in stderr


def test_from_a_failed_run_says_so_too(here: Path) -> None:
    folder = here / "runs" / "train-1"
    folder.mkdir(parents=True)
    record = {
        "script": "train.py",
        "argv": [],
        "exit": {"status": "error", "code": 1, "exception": "KeyError: 'lr'"},
        "steps": {"count": 0},
        "findings": [],
    }
    (folder / "run.json").write_text(json.dumps(record))
    result = CliRunner().invoke(cli, ["fix", "--from", str(folder)], catch_exceptions=False)
    assert result.exit_code == 1
    assert "failed before its first step (exit: error, code 1): KeyError: 'lr'" in result.stderr


@pytest.mark.parametrize(
    "exit_",
    [
        {"status": "completed", "code": 0},
        {"status": "stopped", "code": 0},
        None,
        {"status": "error", "code": "1"},
    ],
)
def test_a_run_that_ended_well_is_no_failure(exit_: dict[str, object] | None) -> None:
    assert ScriptFailure.of(RunRecord.from_dict({"exit": exit_, "steps": {"count": 20}})) is None


def test_a_failure_after_steps_and_a_signal() -> None:
    f = ScriptFailure.of(
        RunRecord.from_dict({"exit": {"status": "killed", "code": 137}, "steps": {"count": 12}})
    )
    assert f is not None
    assert (f.code, f.text()) == (
        137,
        "the script failed after 12 step(s) (exit: killed, code 137)",
    )
