"""Shared test fixtures: where the real-trace corpus lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Absolute, so tests may link to or chdir away from it safely.
TRACES = Path(os.environ.get("TORCHDOCTOR_TRACES", REPO.parent / "shared" / "traces")).absolute()


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The recorded GPU traces (../shared/traces, or $TORCHDOCTOR_TRACES)."""
    if not (TRACES / "MANIFEST.md").is_file():
        pytest.skip(f"real-trace corpus not found at {TRACES} (set TORCHDOCTOR_TRACES)")
    return TRACES


def corpus_file(name: str) -> Path:
    """Path of one corpus trace by its stem; skips the test when the corpus is absent."""
    path = TRACES / f"{name}.json.gz"
    if not path.is_file():
        pytest.skip(f"corpus trace {path} not found (set TORCHDOCTOR_TRACES)")
    return path
