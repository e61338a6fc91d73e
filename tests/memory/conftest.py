"""Where the real CUDA memory snapshots live (../shared/snapshots or $TORCHDOCTOR_SNAPSHOTS)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = Path(
    os.environ.get("TORCHDOCTOR_SNAPSHOTS", REPO.parent / "shared" / "snapshots")
).absolute()
GPT = "gpt_lm_train_step.pickle"


@pytest.fixture(scope="session")
def gpt_snapshot() -> Path:
    path = SNAPSHOTS / GPT
    if not path.is_file():
        pytest.skip(f"real snapshot {path} not found (set TORCHDOCTOR_SNAPSHOTS)")
    return path


class _PlainOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise AssertionError(f"global {module}.{name} in a test snapshot")


@pytest.fixture(scope="session")
def gpt_raw(gpt_snapshot: Path) -> dict[str, Any]:
    """The snapshot as plain data, read by the test itself (independent of the code under test)."""
    with gpt_snapshot.open("rb") as f:
        return _PlainOnly(f).load()  # type: ignore[no-any-return]
