"""Unified diffs of the user's files, the line map through an edit, and ``--write``."""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from torchdoctor.errors import OutputError, UserError
from torchdoctor.fix.sources import relative

BACKUP_SUFFIX = ".orig"


def unified(path: str, old: str, new: str, cwd: str | None = None, context: int = 3) -> str:
    """The ``git apply`` / ``patch -p1`` diff of one file ('' when unchanged)."""
    if old == new:
        return ""
    rel = relative(path, cwd)
    lines = difflib.unified_diff(
        _lines(old), _lines(new), fromfile=f"a/{rel}", tofile=f"b/{rel}", n=context
    )
    return "".join(lines)


def _lines(text: str) -> list[str]:
    out = text.splitlines(keepends=True)
    if out and not out[-1].endswith("\n"):
        out[-1] += "\n\\ No newline at end of file\n"
    return out


def patch_text(originals: dict[str, str], patched: dict[str, str], cwd: str | None = None) -> str:
    """One diff for every changed file, in path order."""
    return "".join(
        unified(p, originals[p], patched[p], cwd) for p in sorted(patched) if p in originals
    )


def line_map(old: str, new: str) -> Callable[[int], int]:
    """Where a 1-based line of ``old`` is in ``new``: unchanged lines follow their text; a
    replaced or deleted line maps to the first line that replaced it."""
    a, b = old.splitlines(), new.splitlines()
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()

    def where(line: int) -> int:
        i = line - 1
        for tag, i1, i2, j1, j2 in ops:
            if not i1 <= i < i2:
                continue
            if tag == "equal":
                return j1 + (i - i1) + 1
            # a replaced line that was only re-indented (moved into a new block) keeps its text
            text = a[i].strip()
            same = [j for j in range(j1, j2) if b[j].strip() == text and text]
            return (same[0] if same else j1) + 1
        return min(line, len(b)) or 1

    return where


def changed_lines(old: str, new: str) -> list[tuple[int, int]]:
    """``(first, last)`` 1-based line ranges of ``old`` an edit touched (an insertion is the
    range of the line it follows)."""
    a, b = old.splitlines(), new.splitlines()
    out = []
    for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            out.append((max(1, i1), max(1, i2)) if i2 > i1 else (max(1, i1), max(1, i1)))
    return out


def backup_path(path: str) -> Path:
    """``train.py.orig``, or ``train.py.orig.1``... when that exists (never overwritten)."""
    base = Path(path + BACKUP_SUFFIX)
    if not base.exists():
        return base
    for i in range(1, 1000):
        p = Path(f"{base}.{i}")
        if not p.exists():
            return p
    raise UserError(f"{path}: too many backups beside it")


def write_patched(originals: dict[str, str], patched: dict[str, str]) -> list[tuple[str, Path]]:
    """Write each changed file, its original kept beside it first; returns (file, backup).

    A file that changed on disk since it was read is refused (its edit was made against the
    text that was read); each file is replaced atomically, its mode kept."""
    out = []
    for path in sorted(patched):
        if patched[path] == originals.get(path):
            continue
        current = Path(path).read_text(encoding="utf-8")
        if current != originals[path]:
            raise UserError(f"{path} changed since it was read: run fix again")
        backup = backup_path(path)
        shutil.copy2(path, backup)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".torchdoctor-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(patched[path])
            shutil.copymode(path, tmp)
            os.replace(tmp, path)
        except OSError as exc:  # a full disk: the file is left as it was, named in one line
            Path(tmp).unlink(missing_ok=True)
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        out.append((path, backup))
    return out
