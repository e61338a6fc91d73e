"""docs/api.md's examples are doctests: run every ``>>>`` line from the folder that holds the
recorded traces, so the page's outputs are what the code prints."""

from __future__ import annotations

import doctest
import os
from pathlib import Path

import pytest

from tests.conftest import REPO, TRACES

pytest.importorskip("torch", reason="the check examples run a training loop")


def test_api_page_examples_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not (TRACES / "v100_resnet50_train_workers0.json.gz").is_file():
        pytest.skip(f"real-trace corpus not found at {TRACES} (set TORCHDOCTOR_TRACES)")
    monkeypatch.chdir(TRACES.parent)
    if TRACES.name != "traces":  # a corpus elsewhere: the page reads "traces/..."
        os.symlink(TRACES, tmp_path / "traces")
        monkeypatch.chdir(tmp_path)
    result = doctest.testfile(
        str(REPO / "docs" / "api.md"),
        module_relative=False,
        globs={"RUNS": tmp_path / "runs"},
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
        verbose=False,
    )
    assert result.attempted >= 15
    assert result.failed == 0, f"{result.failed} example(s) in docs/api.md failed (see output)"
