"""``scripts/run_record_shape.py``: two run records compared by keys, order and types, with
floats (timings) only typed."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))
shape = importlib.import_module("run_record_shape")


def test_timings_differ_quietly_and_shapes_loudly() -> None:
    before = {"steps": {"count": 3, "mean_ms": 1.5}, "config": {"a": 1, "b": [1, 2]}}
    same = {"steps": {"count": 3, "mean_ms": 9.0}, "config": {"a": 1, "b": [1, 2]}}
    assert [k for k, _ in shape.differences(before, same)] == ["equal"] * 4
    moved = {"config": {"b": [1], "a": 2}, "steps": {"count": 3, "mean_ms": None}}
    found = list(shape.differences(before, moved))
    assert ("shape", ".: keys reordered ['steps', 'config'] -> ['config', 'steps']") in found
    assert ("shape", ".steps.mean_ms: float -> null") in found
    assert ("shape", ".config: keys reordered ['a', 'b'] -> ['b', 'a']") in found
    assert ("value", ".config.a: 1 -> 2") in found
    assert ("shape", ".config.b: 2 items -> 1") in found
    gone = list(shape.differences({"a": 1, "b": 2}, {"a": 1, "c": 2}))
    assert gone[0] == ("shape", ".: keys missing ['b'] added ['c']")


def test_folders_are_paired_by_script_and_the_exit_says_whether_shapes_match(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for side, ms in (("a", 1.0), ("b", 2.0)):
        run = tmp_path / side / "train-1"
        run.mkdir(parents=True)
        doc = {"script": "/w/train.py", "steps": {"mean_ms": ms, "count": 4}}
        (run / "run.json").write_text(json.dumps(doc))
    assert shape.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    (tmp_path / "b" / "train-1" / "run.json").write_text(
        json.dumps({"script": "/w/train.py", "steps": {"count": 4}})
    )
    assert shape.main([str(tmp_path / "a"), str(tmp_path / "b"), "--section", "steps"]) == 1
    assert "keys missing ['mean_ms']" in capsys.readouterr().out
