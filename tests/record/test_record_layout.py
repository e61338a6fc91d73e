"""The run folder's file names are spelled once, in ``record/layout.py``: every writer and reader
goes through it (a renamed file cannot leave a reader behind)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from torchdoctor.record import layout

SRC = Path(__file__).resolve().parents[2] / "src" / "torchdoctor"
NAMES = {
    layout.RUN,
    layout.REPORT_JSON,
    layout.REPORT_TEXT,
    layout.TRACE,
    layout.STEPS_LOG,
    layout.SNAPSHOT,
}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            ids.add(id(node.value))  # attribute docstrings
    return ids


def spelled_names(src: Path) -> list[str]:
    found = []
    for path in sorted(src.rglob("*.py")):
        if path == src / "record" / "layout.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            folder = node.value in (layout.RANKS, layout.TRACES) and _in_path(tree, node)
            if id(node) not in docs and (node.value in NAMES or folder):
                found.append(f"{path.relative_to(src)}:{node.lineno}: {node.value!r}")
    return found


def _in_path(tree: ast.AST, const: ast.Constant) -> bool:
    """``folder / "ranks"``: the folder name used as a path part (not a JSON key)."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and const in (node.left, node.right)
        ):
            return True
    return False


@pytest.mark.slow
def test_no_module_spells_a_run_folder_file_name() -> None:
    found = spelled_names(SRC)
    assert found == [], "\n".join(found)


def test_the_check_finds_a_spelled_name(tmp_path: Path) -> None:
    (tmp_path / "compare").mkdir()
    (tmp_path / "compare" / "sides.py").write_text(
        '"""Reads run.json."""\nfrom pathlib import Path\n\n\ndef f(p: Path) -> Path:\n'
        '    return p / "ranks" / "rank0.json" if p else p / "report.json"\n'
    )
    found = spelled_names(tmp_path)
    assert sorted(f.split(": ", 1)[1] for f in found) == ["'ranks'", "'report.json'"]


def test_the_layout_places_each_rank_apart(tmp_path: Path) -> None:
    one = {layout.record_file(tmp_path, 0, False), layout.trace_file(tmp_path, 0, False)}
    ranks = {layout.record_file(tmp_path, r, True) for r in range(4)}
    ranks |= {layout.trace_file(tmp_path, r, True) for r in range(4)}
    ranks |= {layout.steps_log(tmp_path, r, True) for r in range(4)}
    assert len(ranks) == 12 and not one & ranks
    assert layout.record_file(tmp_path, 0, False) == layout.run_file(tmp_path)
    assert layout.snapshot_name(3) != layout.snapshot_name(None)
