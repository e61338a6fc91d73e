"""docs/contract.md names the test that holds each row: every one of them must exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_REF = re.compile(r"`((?:tests/[\w/]+/)?test_\w+\.py)::(test_\w+)`")


def test_every_test_the_contract_names_exists() -> None:
    text = (ROOT / "docs" / "contract.md").read_text(encoding="utf-8")
    refs = _REF.findall(text)
    assert len(refs) >= 30, "the table names its tests as `file.py::test_name`"
    for file, name in refs:
        path = ROOT / file if file.startswith("tests/") else ROOT / "tests" / "hostile" / file
        assert path.is_file(), file
        assert re.search(rf"^def {name}\(", path.read_text(encoding="utf-8"), re.M), (file, name)
