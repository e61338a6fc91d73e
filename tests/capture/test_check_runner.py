"""Running a script as __main__: argv, exit statuses, and the script's own traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from torchdoctor.capture.clock import StopScript
from torchdoctor.capture.runner import run_script


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "prog.py"
    path.write_text(body)
    return str(path)


def test_runs_as_main_with_its_own_argv(tmp_path: Path) -> None:
    out = tmp_path / "seen.txt"
    body = (
        "import sys\n"
        "if __name__ == '__main__':\n"
        f"    open({str(out)!r}, 'w').write(repr(sys.argv) + repr(sys.path[0]))\n"
    )
    saved = sys.argv[:]
    prog = script(tmp_path, body)
    outcome = run_script(prog, ["--lr", "3e-4"])
    assert outcome.status == "completed" and outcome.code == 0
    assert out.read_text() == repr([prog, "--lr", "3e-4"]) + repr(str(tmp_path))
    assert sys.argv == saved


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ("import sys; sys.exit(3)", "exited", 3),
        ("import sys; sys.exit(0)", "completed", 0),
        ("import sys; sys.exit()", "completed", 0),
        ("import sys; sys.exit('bad config')", "exited", 1),
        ("raise ValueError('broken')", "error", 1),
        ("raise KeyboardInterrupt", "interrupted", 130),
    ],
)
def test_exit_statuses(
    tmp_path: Path, body: str, status: str, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = run_script(script(tmp_path, body), [])
    assert (outcome.status, outcome.code) == (status, code)
    err = capsys.readouterr().err
    if status == "error":
        assert "ValueError: broken" in err and "prog.py" in err
        assert "runpy" not in err and "runner.py" not in err  # only the script's frames
    if "bad config" in body:
        assert "bad config" in err


def test_stop_is_not_an_error_even_under_except_exception(tmp_path: Path) -> None:
    stop = StopScript.__module__
    body = (
        f"from {stop} import StopScript\n"
        "try:\n"
        "    raise StopScript\n"
        "except Exception:\n"
        "    raise SystemExit(9)\n"
    )
    outcome = run_script(script(tmp_path, body), [])
    assert (outcome.status, outcome.code) == ("stopped", 0)
