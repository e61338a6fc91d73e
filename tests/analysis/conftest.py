"""Fixtures for the analysis tests: corpus traces loaded once, and their raw JSON events."""

from __future__ import annotations

import gzip
import json
from functools import cache
from typing import Any

import pytest

from tests.conftest import corpus_file
from torchdoctor.trace.load import load_trace
from torchdoctor.trace.table import TraceTable


@cache
def _table(name: str) -> TraceTable:
    return load_trace(corpus_file(name))


@cache
def _raw(name: str) -> dict[str, Any]:
    with gzip.open(corpus_file(name), "rt", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture
def corpus() -> Any:
    """``corpus(stem)``: the loaded TraceTable of a corpus trace (skips if absent)."""
    return _table


@pytest.fixture
def raw() -> Any:
    """``raw(stem)``: the trace file parsed with the json module, for brute-force checks."""
    return _raw
