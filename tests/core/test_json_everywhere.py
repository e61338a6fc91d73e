"""Every command spells its JSON output the same way: ``--json -`` (and a bare ``--json``) prints
only JSON on standard output; ``--json PATH`` writes the file and prints the text report. Each
command runs for real, in its own process, on a real input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_file
from tests.memory.conftest import GPT, SNAPSHOTS

REPO = Path(__file__).resolve().parents[2]
CHECK_SCRIPT = REPO / "examples" / "check" / "batches_then_steps.py"
TUNE_WORKLOAD = REPO / "tests" / "tune" / "workloads" / "tiny.py"
CHECK_FAST = ["--warmup", "1", "--steps", "2", "--clean-steps", "0"]
TUNE_FAST = [
    *("--knobs", "optimizer_impl", "--max-trials", "2", "--steps", "2", "--warmup", "1"),
    *("--fidelity-steps", "2", "--max-rounds", "6", "--db", "t.sqlite", "--out", "best.toml"),
]


def _torchdoctor(
    args: list[str], cwd: Path, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "torchdoctor", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _json_on_stdout(args: list[str], cwd: Path, timeout: int = 300) -> dict[str, Any]:
    ran = _torchdoctor(args, cwd, timeout)
    assert ran.returncode == 0, (args, ran.stderr[-2000:])
    assert ran.stdout.lstrip().startswith("{"), (args, ran.stdout[:300])
    doc = json.loads(ran.stdout)  # nothing but the JSON on stdout
    assert isinstance(doc, dict) and doc, args
    return doc


def _at_once(*runs: Callable[[], Any]) -> list[Any]:
    """Independent commands run at the same time (each waits on its own process): on two
    cores a pair takes about one command's time."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(runs)) as pool:
        return [f.result() for f in [pool.submit(r) for r in runs]]


def _snapshot() -> Path:
    path = SNAPSHOTS / GPT
    if not path.is_file():
        pytest.skip(f"real snapshot {path} not found (set TORCHDOCTOR_SNAPSHOTS)")
    return path


def _trace_inputs(command: str) -> list[str]:
    if command == "analyze":
        return [str(corpus_file("h100_bert_small_infer"))]
    if command == "compare":
        return [
            str(corpus_file("v100_resnet50_train_workers0")),
            str(corpus_file("v100_resnet50_train_workers4")),
        ]
    return [str(_snapshot())]


@pytest.mark.parametrize("command", ["analyze", "compare", "memory"])
@pytest.mark.parametrize(
    "spelling",
    [
        ["--json", "-"],
        pytest.param(["--json"], marks=pytest.mark.slow),
        pytest.param(["--json=-"], marks=pytest.mark.slow),
    ],
)
def test_json_to_stdout_reading_a_file(command: str, spelling: list[str], tmp_path: Path) -> None:
    inputs = _trace_inputs(command)
    doc, after = _at_once(
        lambda: _json_on_stdout([command, *spelling, *inputs], tmp_path),  # before the inputs
        lambda: _json_on_stdout([command, *inputs, *spelling], tmp_path),  # and after them
    )
    assert doc.keys() == after.keys()


@pytest.mark.parametrize("command", ["analyze", "compare", "memory"])
def test_json_path_writes_the_file_and_prints_the_text(command: str, tmp_path: Path) -> None:
    ran = _torchdoctor([command, *_trace_inputs(command), "--json", "out.json"], tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads((tmp_path / "out.json").read_text())
    assert not ran.stdout.lstrip().startswith("{") and len(ran.stdout.splitlines()) > 3


@pytest.mark.slow
def test_demo_json(tmp_path: Path) -> None:
    """``demo`` had no JSON output at all."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()  # each its own run folders: the two demos run at the same time
    doc, ran = _at_once(
        lambda: _json_on_stdout(
            ["demo", "--steps", "2", "--out", "d", "--json", "-"], tmp_path / "a"
        ),
        lambda: _torchdoctor(
            ["demo", "--steps", "2", "--out", "d", "--json", "demo.json"], tmp_path / "b"
        ),
    )
    assert doc["tool"]["name"] == "torchdoctor" and doc["steps"]
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads((tmp_path / "b" / "demo.json").read_text())["steps"]
    assert ran.stdout.startswith("wrote ")  # the text report, as without --json


@pytest.mark.slow
def test_tune_json(tmp_path: Path) -> None:
    doc = _json_on_stdout(["tune", str(TUNE_WORKLOAD), *TUNE_FAST, "--json", "-"], tmp_path)
    assert "baseline" in doc and "best" in doc


@pytest.mark.slow
def test_check_then_fix_json(tmp_path: Path) -> None:
    """Before: ``check --json - train.py`` took the ``-`` for the script ('no such option: -'),
    though docs/check.md documents it; ``fix`` reads its arguments the same way."""
    args = ["check", *CHECK_FAST, "--out", "runs", "--json", "-", str(CHECK_SCRIPT)]
    doc = _json_on_stdout(args, tmp_path)
    assert doc["schema"] == "torchdoctor.check-report"
    (run,) = (tmp_path / "runs").iterdir()
    fixed, bare = _at_once(
        lambda: _json_on_stdout(["fix", "--from", str(run), "--json", "-"], tmp_path),
        lambda: _json_on_stdout(["fix", "--from", str(run), "--json"], tmp_path),
    )
    assert fixed["schema"] == "torchdoctor.fix" and "changes" in fixed
    assert bare.keys() == fixed.keys()


def test_check_reads_json_dash_as_the_bare_json() -> None:
    from torchdoctor.commands.check.args import normalize_args

    assert normalize_args(["--json", "-", "train.py", "-x"]) == ["--json", "-", "train.py", "-x"]
    assert normalize_args(["--json", "-", "--steps", "3", "t.py"])[:4] == [
        "--json",
        "-",
        "--steps",
        "3",
    ]
