"""The command line's surface: the top-level help lists each command once, and a reader that
closes standard output early (``| head``) still gets every file the command was asked to write."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import corpus_file
from tests.memory.conftest import GPT, SNAPSHOTS
from torchdoctor.cli import cli

COMMAND_NAMES = ("analyze", "check", "compare", "demo", "fix", "memory", "tune")


def _commands_section(help_text: str) -> list[str]:
    """The lines of the help's ``Commands:`` section (up to the next unindented line)."""
    lines = help_text.splitlines()
    start = lines.index("Commands:") + 1
    section = []
    for line in lines[start:]:
        if line and not line.startswith(" "):
            break
        section.append(line)
    return section


def test_top_level_help_lists_each_command_once() -> None:
    """Before: the group's docstring listed the seven commands, then click's Commands section
    listed them again (with their docstrings cut at 80 characters: 'a folder of...')."""
    out = CliRunner().invoke(cli, ["--help"], terminal_width=100).output
    for name in COMMAND_NAMES:
        mentions = re.findall(rf"^\s+(?:torchdoctor )?{name}\b", out, flags=re.MULTILINE)
        assert len(mentions) == 1, (name, out)
    listed = [
        ln.split()[0] for ln in _commands_section(out) if ln.startswith("  ") and ln[2] != " "
    ]
    assert sorted(listed) == sorted(COMMAND_NAMES)
    assert not any(ln.rstrip().endswith("...") for ln in _commands_section(out))


def _pipe_into_head(args: list[str], cwd: Path) -> tuple[int, str, str]:
    """``torchdoctor ARGS | head -1`` with a real shell pipe: (torchdoctor's status, what head
    printed, torchdoctor's stderr)."""
    cmd = " ".join([f"'{sys.executable}'", "-m", "torchdoctor", *(f"'{a}'" for a in args)])
    script = f'{cmd} 2>err.txt | head -1; echo "status=${{PIPESTATUS[0]}}"'
    env = {**os.environ, "COLUMNS": "100"}
    p = subprocess.run(
        ["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=180, env=env
    )
    status = int(p.stdout.rsplit("status=", 1)[1])
    return status, p.stdout.rsplit("status=", 1)[0], (cwd / "err.txt").read_text()


@pytest.mark.slow
def test_analyze_html_is_written_when_stdout_is_closed_early(tmp_path: Path) -> None:
    """Before: ``analyze TRACE --html r.html | head`` printed the report first; head closed the
    pipe after its line and the HTML was never written."""
    trace = corpus_file("v100_resnet50_train_workers0")
    status, head, err = _pipe_into_head(["analyze", str(trace), "--html", "r.html"], tmp_path)
    assert head.startswith("torchdoctor"), head
    assert status in (0, 141), err  # 141: the documented status for a reader that went away
    assert "Traceback" not in err and "Exception ignored" not in err, err
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert page.rstrip().endswith("</html>")
    assert "Tesla V100" in page


@pytest.mark.slow
def test_memory_html_is_written_when_stdout_is_closed_early(tmp_path: Path) -> None:
    snapshot = SNAPSHOTS / GPT
    if not snapshot.is_file():
        pytest.skip(f"real snapshot {snapshot} not found (set TORCHDOCTOR_SNAPSHOTS)")
    status, head, err = _pipe_into_head(["memory", str(snapshot), "--html", "m.html"], tmp_path)
    assert head.strip(), head
    assert status in (0, 141), err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert (tmp_path / "m.html").read_text(encoding="utf-8").rstrip().endswith("</html>")


def _option_lines(name: str) -> dict[str, str]:
    """Each option of a command's help (wide, so none wraps) by its long name: the line's text."""
    out = CliRunner().invoke(cli, [name, "--help"], terminal_width=400).output
    lines = {}
    for ln in out.splitlines():
        m = re.match(r"^\s+(?:-\w, )?(--[\w-]+)", ln)
        if m:
            lines[m.group(1)] = ln.strip()
    return lines


def test_every_command_spells_json_and_folders_the_same_way() -> None:
    """Before: fix's help read '--json FILE ... to this file; a bare --json prints only the JSON
    on stdout' beside the others' '--json [PATH]', demo's folder read PATH and check's
    DIRECTORY, compare's --timeout read FLOAT RANGE beside check's SECONDS."""
    seen = {}
    for name in COMMAND_NAMES:
        opts = _option_lines(name)
        line = opts["--json"]
        assert line.startswith("--json [PATH] "), (name, line)
        assert "a bare --json (or --json -) prints only the JSON on standard output" in line
        seen[name] = opts
    for name in ("check", "fix", "demo"):
        assert seen[name]["--out"].startswith("--out DIRECTORY "), (name, seen[name]["--out"])
    assert seen["fix"]["--from"].startswith("--from DIRECTORY ")
    for name in ("check", "compare"):
        assert seen[name]["--timeout"].startswith("--timeout SECONDS "), name
    for opt in ("--budget", "--trial-timeout"):
        assert seen["tune"][opt].startswith(f"{opt} DURATION "), seen["tune"][opt]
