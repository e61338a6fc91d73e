"""``compare``'s one options type: the command line's paths split into BASE, NEW and the scripts'
arguments, bad splits refused, and ``run(options)`` giving what the command line gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.synth import write_trace
from tests.report.hostile import hostile_events
from torchdoctor.compare.cli import run
from torchdoctor.compare.options import CompareOptions, sides_of
from torchdoctor.compare.rerun_types import RerunOptions
from torchdoctor.errors import UserError


def test_sides_split_at_the_dashes_and_rerun_arguments_go_to_both_scripts() -> None:
    assert sides_of(("a", "b"), None, False) == (("a",), ("b",), ())
    assert sides_of(("a1", "a2", "a3", "b1", "b2"), 2, False) == (
        ("a1", "a2", "a3"),
        ("b1", "b2"),
        (),
    )
    assert sides_of(("x.py", "y.py", "--epochs", "1"), 2, True) == (
        ("x.py",),
        ("y.py",),
        ("--epochs", "1"),
    )
    assert sides_of(("x.py", "y.py"), None, True) == (("x.py",), ("y.py",), ())


@pytest.mark.parametrize(
    ("sides", "after", "rerun", "says"),
    [
        (("a", "b", "c"), None, False, "separate the sides with --"),
        (("a", "b"), 0, False, "at least one run on each side"),
        (("a", "b"), 2, False, "at least one run on each side"),
        (("x.py", "y.py", "z.py"), None, True, "--rerun takes two scripts"),
    ],
)
def test_a_bad_split_is_a_user_error(
    sides: tuple[str, ...], after: int | None, rerun: bool, says: str
) -> None:
    with pytest.raises(UserError, match=says):
        base, new, args = sides_of(sides, after, rerun)
        CompareOptions(base, new, script_args=args, rerun=RerunOptions() if rerun else None)


def test_rerun_options_need_one_script_a_side() -> None:
    with pytest.raises(UserError, match="two scripts"):
        CompareOptions(("a.py", "b.py"), ("c.py",), rerun=RerunOptions())


def test_run_with_options_writes_what_the_command_line_writes(tmp_path: Path) -> None:
    base = write_trace(tmp_path / "base.json", hostile_events(steps=4, step_us=10_000.0))
    new = write_trace(tmp_path / "new.json", hostile_events(steps=4, step_us=14_000.0))
    ours = tmp_path / "ours.json"
    failed = run(CompareOptions((str(base),), (str(new),), fail_pct=5.0, json_path=str(ours)))
    cli = tmp_path / "cli.json"
    cmd = [sys.executable, "-m", "torchdoctor", "compare", str(base), str(new)]
    r = subprocess.run(
        [*cmd, "--fail-if-slower", "5", "--json", str(cli)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == (1 if failed else 0), r.stderr
    assert json.loads(ours.read_text()) == json.loads(cli.read_text())
    doc = json.loads(ours.read_text())
    assert doc["gate"]["failed"] is failed
