"""docs/contract.md names the test that holds each row: every one of them must exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_benchmarks_compile_copies_never_the_checkout() -> None:
    """The analyse benchmarks run bytecode-compiled code; the bytecode goes to a temporary copy,
    so a benchmark never writes into ``src/``."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "bench_common", ROOT / "benchmarks" / "bench_common.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_common"] = bench
    spec.loader.exec_module(bench)
    before = {p: p.stat().st_mtime_ns for p in (ROOT / "src").rglob("*.pyc")}
    line = bench.compile_bytecode()
    after = {p: p.stat().st_mtime_ns for p in (ROOT / "src").rglob("*.pyc")}
    assert after == before, "compile_bytecode wrote bytecode into src/"
    copy = bench._STAGED[(ROOT / "src").resolve()]
    assert not copy.is_relative_to(ROOT) and any(copy.rglob("*.pyc")), line
    assert bench.torchdoctor_cmd()[:2] == ["env", f"PYTHONPATH={copy}"]
