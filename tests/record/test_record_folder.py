"""``record/folder.py``: every reader of a run folder gets its record, or one line saying why
not: a newer record, another tool's file, a rank path out of the folder, broken JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from torchdoctor.errors import UserError
from torchdoctor.record import layout
from torchdoctor.record.folder import check_schema, read_run
from torchdoctor.record.run import RunRecord

REPO = Path(__file__).resolve().parents[2]


def _write(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _run(folder: Path, **extra: Any) -> dict[str, Any]:
    doc = {
        "schema": layout.RUN_SCHEMA,
        "schema_version": layout.RUN_SCHEMA_VERSION,
        "script": "train.py",
        "steps": {"count": 3, "step_ms": [10.0, 11.0, 12.0]},
        **extra,
    }
    _write(layout.run_file(folder), doc)
    return doc


def test_one_process_folder_reads_its_run_json(tmp_path: Path) -> None:
    doc = _run(tmp_path)
    record = read_run(tmp_path)
    assert record == RunRecord.from_dict(doc) and record.raw == doc
    assert record.schema_version == layout.RUN_SCHEMA_VERSION and record.steps.count == 3
    assert (record.script, record.steps.step_ms) == ("train.py", (10.0, 11.0, 12.0))


def test_torchrun_folder_reads_rank_0_with_the_script(tmp_path: Path) -> None:
    _write(
        layout.run_file(tmp_path),
        {
            "schema": layout.RUN_SCHEMA,
            "schema_version": layout.RUN_SCHEMA_VERSION,
            "script": "train.py",
            "world_size": 2,
            "ranks": {"0": "ranks/rank0.json", "1": "ranks/rank1.json"},
        },
    )
    for rank in (0, 1):
        _write(
            layout.rank_record(tmp_path, rank),
            {"schema": layout.RUN_SCHEMA, "config": {"optimizer_steps": 10 + rank}},
        )
    got = read_run(tmp_path)
    assert got.config.optimizer_steps == 10 and got.script == "train.py"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"schema_version": layout.RUN_SCHEMA_VERSION + 1}, "is newer than this torchdoctor"),
        ({"schema_version": "1"}, "'schema_version' is not a version number"),
        ({"schema": "torchdoctor.report"}, "not a torchdoctor run record"),
        ({"ranks": {"0": "../../etc/passwd"}}, "rank 0's record is not a file of the run folder"),
        ({"ranks": {"0": 7}}, "rank 0's record is not a file of the run folder"),
        ({"ranks": ["ranks/rank0.json"]}, "'ranks' is a list, not an object"),
        ({"ranks": {"0": "ranks/rank0.json"}}, "no such JSON file"),
        ({"steps": [1, 2]}, "the record's 'steps' is a list, not an object"),
        ({"steps": {"step_ms": ["1", "2"]}}, "'steps.step_ms' is not a list of numbers"),
        ({"steps": {"step_ms": [1.0, -2.0]}}, "'steps.step_ms' holds a negative, infinite"),
        ({"steps": {"step_ms": [1.0], "warmup_steps": "1"}}, "'steps.warmup_steps' is not a count"),
        ({"steps": {"experiment_steps": -1}}, "'steps.experiment_steps' is not a count"),
    ],
)
def test_a_record_this_code_cannot_read_is_one_line(
    tmp_path: Path, change: dict[str, Any], says: str
) -> None:
    _run(tmp_path, **change)
    with pytest.raises(UserError, match=None) as err:
        read_run(tmp_path)
    message = str(err.value)
    assert says in message and "\n" not in message, message


def test_broken_json_and_a_folder_without_a_run(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a torchdoctor check run folder"):
        read_run(tmp_path)
    layout.run_file(tmp_path).write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match="not readable JSON"):
        read_run(tmp_path)
    _write(layout.run_file(tmp_path), [1, 2])
    with pytest.raises(UserError, match="is a list, not an object"):
        read_run(tmp_path)


def test_a_record_older_than_the_schema_fields_is_read() -> None:
    check_schema({"steps": {}}, "old run.json")  # no schema, no version: read as it is
    assert RunRecord.from_dict({"steps": {}}).schema_version == 0


@pytest.mark.parametrize("command", [["compare"], ["fix", "--from"]])
def test_the_commands_refuse_a_newer_record_with_exit_2(tmp_path: Path, command: list[str]) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _run(a, schema_version=layout.RUN_SCHEMA_VERSION + 5)
    _run(b)
    args = [*command, str(a)] + ([str(b)] if command == ["compare"] else [])
    r = subprocess.run(
        [sys.executable, "-m", "torchdoctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "is newer than this torchdoctor" in r.stderr and "Traceback" not in r.stderr
