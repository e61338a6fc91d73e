"""Which files are the user's, where a recorded site points, and the files fix may rewrite.

A fix is a patch of the user's own code: a file of an installed package, the standard library,
torch or torchdoctor (``code_paths``) is never rewritten; a finding that points there is refused
("the object comes from a library").
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from torchdoctor.code_paths import code_paths

_SITE = re.compile(r"^(?P<path>.+?):(?P<line>\d+)(?:\s+\(.*\))?$")


def is_library(path: str) -> bool:
    """True for a file in an installed package, the standard library, torch or torchdoctor."""
    return not code_paths().is_user(path)


def is_user_file(path: str) -> bool:
    """A Python source file of the user's own (exists, ``.py``, not library code)."""
    return path.endswith(".py") and os.path.isfile(path) and not is_library(path)


def parse_site(site: str) -> tuple[str, int] | None:
    """``("train.py", 36)`` from ``"train.py:36"`` or ``"train.py:18 (forward)"``."""
    m = _SITE.match(site.strip())
    if not m or m.group("path").startswith(("<", "?")) or int(m.group("line")) < 1:
        return None
    return m.group("path"), int(m.group("line"))


def resolve(path: str, bases: tuple[str, ...]) -> str | None:
    """The absolute path of a recorded file name: as is when absolute, else the first of
    ``bases`` (the run's working directory, the script's folder) that holds it."""
    if os.path.isabs(path):
        return path if os.path.isfile(path) else None
    for base in bases:
        p = os.path.join(base, path)
        if os.path.isfile(p):
            return os.path.abspath(p)
    return None


def local_imports(script: str) -> list[str]:
    """The script's own modules: files beside it that it imports (one level, no packages
    from site-packages), so a codemod searching for a construction also looks there."""
    try:
        tree = ast.parse(Path(script).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    here = os.path.dirname(os.path.abspath(script))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    out = []
    for name in names:
        p = os.path.join(here, *name.split(".")) + ".py"
        if os.path.isfile(p) and is_user_file(p) and p not in out:
            out.append(p)
    return out


def relative(path: str, cwd: str | None = None) -> str:
    """``path`` relative to the working directory when it lies under it (for diffs)."""
    cwd = cwd or os.getcwd()
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel
