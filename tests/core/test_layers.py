"""The package is built in floors: a module imports only from its own floor or the ones below
(lazy imports inside functions and ``TYPE_CHECKING`` imports included), and the folders form no
import cycle. See docs/architecture.md for what each floor holds."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from tests.api.test_api_import_cycles import cycles  # Tarjan's, on any graph

SRC = Path(__file__).resolve().parents[2] / "src" / "torchdoctor"

# Lowest first. A name is a top-level module (without .py) or a folder of the package.
FLOORS: list[set[str]] = [
    {
        "_version",
        "errors",
        "stats",
        "hardware",
        "terminal",
        "inputs",
        "exits",
        "config",
        "threshold",
        "code_paths",
        "ab",
    },
    {"units", "roofline", "json_arg", "cli_options"},
    {"record"},
    {"trace"},
    {"analysis"},
    {"memory"},
    {"rules"},
    {"report"},
    {"capture"},
    {"runtime"},
    {
        "commands",
        "tune",
        "compare",
        "fix",
    },  # the commands; they may use each other, never in a cycle
    {"integrations"},
    {"api"},
    {"cli", "__init__", "__main__"},
]
FLOOR_OF = {name: i for i, names in enumerate(FLOORS) for name in names}


def _room(path: Path, src: Path) -> str:
    """The floor name of a source file: its folder, or its module name at the top level."""
    rel = path.relative_to(src)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path, src: Path) -> list[tuple[int, str]]:
    """Every ``torchdoctor`` module a file imports, anywhere in it, as absolute names."""
    rel = path.relative_to(src.parent).with_suffix("")
    package = list(rel.parts[:-1])  # the package a relative import starts from
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module != src.name:  # ``from torchdoctor import stats`` imports stats
                found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{a.name}") for a in node.names]
    return [(line, m) for line, m in found if m.split(".")[0] == src.name]


def _target_room(module: str, src: Path) -> str | None:
    parts = module.split(".")[1:]
    if not parts:
        return "__init__"
    if (src / parts[0]).is_dir() or (src / f"{parts[0]}.py").is_file():
        return parts[0]
    return None  # a name imported from the package itself (``from torchdoctor import x``)


def layer_violations(src: Path) -> tuple[list[str], dict[str, set[str]]]:
    """Imports that reach a higher floor, and the folder-to-folder import graph."""
    bad: list[str] = []
    graph: dict[str, set[str]] = defaultdict(set)
    for path in sorted(src.rglob("*.py")):
        room = _room(path, src)
        for line, module in _imports(path, src):
            target = _target_room(module, src)
            if target is None or target == room:
                continue
            graph[room].add(target)
            if room not in FLOOR_OF or target not in FLOOR_OF:
                bad.append(f"{path.relative_to(src)}:{line}: {room} or {target} has no floor")
            elif FLOOR_OF[target] > FLOOR_OF[room]:
                bad.append(
                    f"{path.relative_to(src)}:{line}: {room} imports {target}, a floor above"
                )
    return sorted(set(bad)), graph


@pytest.mark.slow
def test_no_module_imports_from_a_floor_above_it() -> None:
    bad, _ = layer_violations(SRC)
    assert bad == [], "\n".join(bad)


@pytest.mark.slow
def test_the_folders_form_no_import_cycle() -> None:
    _, graph = layer_violations(SRC)
    assert cycles(graph) == []  # modules: tests/api/test_api_import_cycles.py


def test_every_file_is_on_a_floor() -> None:
    rooms = {_room(p, SRC) for p in SRC.rglob("*.py")}
    assert rooms - set(FLOOR_OF) == set()


@pytest.mark.slow
def test_every_imported_torchdoctor_module_exists() -> None:
    """A moved module leaves no stale import behind (a lazy one would only fail when it runs)."""
    missing = []
    for path in SRC.rglob("*.py"):
        for line, module in _imports(path, SRC):
            parts = module.split(".")[1:]
            here = SRC.joinpath(*parts) if parts else SRC
            parent = SRC.joinpath(*parts[:-1]) if parts else SRC
            ok = (
                here.is_dir()
                or here.with_suffix(".py").is_file()
                or (parent / "__init__.py").is_file()  # a name defined in a package
                or parent.with_suffix(".py").is_file()  # a name defined in a module
            )
            if not ok:
                missing.append(f"{path.relative_to(SRC)}:{line}: {module}")
    assert missing == [], "\n".join(missing)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    src = tmp_path / "torchdoctor"
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    return src


@pytest.mark.parametrize(
    "text",
    [
        "from torchdoctor.rules.thresholds import X\n",
        "def f():\n    from torchdoctor.rules import thresholds\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torchdoctor.rules.x\n",
        "from ..rules.thresholds import X\n",
    ],
    ids=["top-level", "lazy", "type-checking", "relative"],
)
def test_the_check_finds_an_upward_import_in_any_form(tmp_path: Path, text: str) -> None:
    src = _tree(
        tmp_path,
        {"analysis/__init__.py": "", "analysis/waits.py": text, "rules/__init__.py": ""},
    )
    bad, _ = layer_violations(src)
    assert len(bad) == 1 and bad[0].startswith("analysis/waits.py:"), bad


def test_the_check_finds_a_cycle_on_one_floor(tmp_path: Path) -> None:
    src = _tree(
        tmp_path,
        {
            "tune/a.py": "from torchdoctor.fix import b\n",
            "fix/b.py": "def g():\n    import torchdoctor.tune.a\n",
        },
    )
    bad, graph = layer_violations(src)
    assert bad == [] and cycles(graph) == [["fix", "tune"]]
