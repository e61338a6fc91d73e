"""The command line: durations, one-line errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from torchdoctor.errors import UserError
from torchdoctor.tune.cli import parse_duration, tune_command

HERE = Path(__file__).parent / "workloads"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("300", 300.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        (" 2.5m ", 150.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "m", "-5", "0", "5m3", "five minutes", "1h 30"])
def test_bad_duration(text: str) -> None:
    with pytest.raises(UserError, match="bad duration"):
        parse_duration(text)


def one_line_error(args: list[str], tmp_path: Path) -> str:
    result = CliRunner().invoke(tune_command, [*args, "--db", str(tmp_path / "t.sqlite")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchdoctor: error: ")
    return lines[0]


def test_missing_workload_file(tmp_path: Path) -> None:
    assert "no such workload file" in one_line_error([str(tmp_path / "nope.py")], tmp_path)


def test_workload_without_the_decorated_function(tmp_path: Path) -> None:
    line = one_line_error([str(HERE / "no_function.py")], tmp_path)
    assert "no function decorated with @torchdoctor.workload" in line


def test_bad_budget(tmp_path: Path) -> None:
    assert "bad duration '5 minutes'" in one_line_error(
        [str(HERE / "tiny.py"), "--budget", "5 minutes"], tmp_path
    )


def test_unknown_knob(tmp_path: Path) -> None:
    assert "unknown knob 'workers'" in one_line_error(
        [str(HERE / "tiny.py"), "--knobs", "workers"], tmp_path
    )


def test_resume_with_nothing_to_resume(tmp_path: Path) -> None:
    line = one_line_error([str(HERE / "tiny.py"), "--resume"], tmp_path)
    assert "does not exist (nothing to resume)" in line
    assert not (tmp_path / "t.sqlite").exists()  # not a fresh run in a new file


def test_resume_with_a_file_without_this_workload(tmp_path: Path) -> None:
    from torchdoctor.tune.store import Store

    Store(tmp_path / "t.sqlite").close()
    assert "no earlier run of" in one_line_error([str(HERE / "tiny.py"), "--resume"], tmp_path)


def test_markup_in_phases_and_reasons_reaches_the_terminal_verbatim() -> None:
    from rich.console import Console

    from torchdoctor.tune.report import progress_line
    from torchdoctor.tune.search import Record
    from torchdoctor.tune.space import BASELINE
    from torchdoctor.tune.trial import Trial, TrialResult

    reason = "RuntimeError: shape [64, 512] [/bold] [red]x"
    rec = Record(
        2,
        Trial("k", "single", {**BASELINE, "num_workers": 2}),
        TrialResult(status="error", reason=reason),
        None,
        None,
    )
    console = Console(record=True, width=300)
    console.print(progress_line(rec, 9, None, 12.0))
    text = console.export_text()
    assert "trial 3 of ~9 [single] num_workers=2: error: " + reason in text


def test_syntax_error_in_workload(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def build(:\n")
    assert "syntax error" in one_line_error([str(bad)], tmp_path)
