"""``run.json`` is read in one place, ``record/``: everything else takes the typed ``RunRecord``
(``record/run.py``), so a renamed or reshaped key cannot leave a reader behind.

What counts as a raw read, outside ``src/torchdoctor/record/``:

- ``X.raw[key]`` / ``X.raw.get(key)``, any key (``RunRecord.raw`` and its sections' ``raw``);
- ``R[key]`` / ``R.get(key)`` with ``key`` a top-level key of ``run.json`` (``RUN_KEYS``) and
  ``R`` a name or attribute called ``record``, ``rec``, ``run``, ``primary`` or ``raw``
  (what the code calls a run record: ``record["steps"]``, ``self.record.get("exit")``).

A read of a loaded subscript only (``record["oom"] = ...`` writes). Files still left are in
``ALLOWED``, each with its reason; an entry that no longer reads raw fails too, so the list only
shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from torchdoctor.record.write import RankPlace, RunHeader

SRC = Path(__file__).resolve().parents[2] / "src" / "torchdoctor"

# The header's keys as the writer makes them, the steps, and the watchers' sections
# (capture/session.py, capture/accounting.py, capture/runner.py) and the torchrun index's.
RUN_KEYS = set(RunHeader("s.py", [], {}, RankPlace(), {}, None, None).to_dict()) | {
    "steps",
    "ops",
    "job",
    "compile",
    "config",
    "syncs",
    "cpu",
    "monitor",
    "profiler",
    "gpu",
    "cuda_available",
    "framework",
    "frameworks",
    "notes",
    "lines",
    "roofline",
    "modes",
    "repeats",
    "forwards",
    "experiments",
    "memory_steps",
    "oom",
    "trace",
    "findings",
    "ranks",
    "world_size",
    "missing_ranks",
}
RECORD_NAMES = {"record", "rec", "run", "primary", "raw"}

# A folder entry (ending in "/") covers every file under it. Empty: the end of a check run
# builds its record from parts in record/write.py (ended_document, without_sites).
ALLOWED: dict[str, str] = {}


def _allowed(rel: str) -> str | None:
    """The ``ALLOWED`` entry that covers a file, if any."""
    return next((a for a in ALLOWED if rel == a or (a.endswith("/") and rel.startswith(a))), None)


def _receiver(node: ast.AST) -> tuple[ast.expr, object] | None:
    """``(receiver, key)`` of a loaded ``R[key]`` or a call ``R.get(key, ...)``."""
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Load)
        and isinstance(node.slice, ast.Constant)
    ):
        return node.value, node.slice.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        return node.func.value, node.args[0].value
    return None


def _is_raw_read(recv: ast.expr, key: object) -> bool:
    if not isinstance(key, str):
        return False
    if isinstance(recv, ast.Attribute) and recv.attr == "raw":
        return True
    name = recv.id if isinstance(recv, ast.Name) else getattr(recv, "attr", None)
    return name in RECORD_NAMES and key in RUN_KEYS


def raw_reads(src: Path) -> dict[str, list[str]]:
    """File (relative to ``src``) -> ``line: receiver[key]`` of each raw read outside record/."""
    found: dict[str, list[str]] = {}
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        if rel.parts[0] == "record":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            got = _receiver(node)
            if got is not None and _is_raw_read(*got):
                site = f"{node.lineno}: {ast.unparse(got[0])}[{got[1]!r}]"
                found.setdefault(rel.as_posix(), []).append(site)
    return found


@pytest.mark.slow
def test_no_module_outside_record_reads_run_json_keys_raw() -> None:
    found = raw_reads(SRC)
    new = {f: sites for f, sites in found.items() if _allowed(f) is None}
    assert new == {}, "read the typed RunRecord instead:\n" + "\n".join(
        f"{f}:{s}" for f, sites in new.items() for s in sites
    )
    stale = sorted(set(ALLOWED) - {_allowed(f) for f in found})
    assert stale == [], f"no raw read left: take these off ALLOWED: {stale}"


def test_the_check_finds_raw_reads_in_every_form(tmp_path: Path) -> None:
    (tmp_path / "report").mkdir()
    (tmp_path / "record").mkdir()
    (tmp_path / "report" / "page.py").write_text(
        "def f(record, ctx, run, doc):\n"
        "    a = record['steps']\n"  # found
        "    b = ctx.record.get('exit')\n"  # found: an attribute named record
        "    c = run.raw.get('anything')\n"  # found: .raw, any key
        "    record['oom'] = {}\n"  # a write: not a read
        "    d = doc['steps']\n"  # not a record's name
        "    e = record['not_a_run_key']\n"  # not a run.json key
        "    return run.steps.count\n"  # typed: fine
    )
    (tmp_path / "record" / "run.py").write_text("def g(d):\n    return d.raw['steps']\n")
    found = raw_reads(tmp_path)
    assert found == {
        "report/page.py": [
            "2: record['steps']",
            "3: ctx.record['exit']",
            "4: run.raw['anything']",
        ]
    }
