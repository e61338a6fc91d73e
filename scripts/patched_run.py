"""Run a script that ``torchdoctor fix --write`` patched and say whether each patch ran.

    python scripts/patched_run.py --fix fix.json --out ran.json -- train.py --its args

A patch that never runs (code inserted after a ``return``, in a branch the script never takes)
changes nothing, whatever the report predicted. Each change of ``fix.json`` (``--json`` of
``fix``) is located in the patched file by its diff: the lines it added, or for a change that
only removed lines the line before them; the statement holding that line (the smallest one
``ast`` finds) is what must run. The script then runs here, in this process, under a line
tracer limited to the patched files, which switches itself off once every watched statement
has run (the rest of the run pays nothing). ``--out`` gets, per change, whether it ran; the exit
status is the script's.

Worker processes (DataLoader) inherit the tracer but never write the result: the main process
builds the loader, which is where a loader's patch runs.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import runpy
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def changed(diff: str) -> list[tuple[int, str]]:
    """(line number in the new file, its text) for each line a unified diff added; for a hunk
    that only removed lines, the new file's line before its first removal."""
    hunks: list[tuple[list[tuple[int, str]], tuple[int, str] | None]] = []
    new, before = 0, (1, "")
    for line in diff.splitlines():
        m = _HUNK.match(line)
        if m:
            new = int(m.group(1))
            hunks.append(([], None))
        elif not hunks or line.startswith(("---", "+++")):
            continue
        elif line.startswith("+"):
            hunks[-1][0].append((new, line[1:]))
            before, new = (new, line[1:]), new + 1
        elif line.startswith("-"):
            if hunks[-1][1] is None:
                hunks[-1] = (hunks[-1][0], before)
        else:
            before, new = (new, line[1:]), new + 1
    out: list[tuple[int, str]] = []
    for added, removed_after in hunks:
        out.extend(added or ([removed_after] if removed_after is not None else []))
    return out


def changed_lines(diff: str) -> list[int]:
    """The new file's line numbers of ``changed``."""
    return sorted({n for n, _ in changed(diff)})


def located(lines: list[str], n: int, text: str) -> int:
    """Where line ``n`` of one change's diff is in the file all changes made: each change's
    diff is against the original, so another change's lines above it move it; the nearest line
    with the same text, else ``n``."""
    same = [i for i, line in enumerate(lines, 1) if line.strip() == text.strip()]
    return min(same, key=lambda i: abs(i - n)) if text.strip() and same else n


def statement_span(source: str, line: int) -> tuple[int, int]:
    """(first, last) line of the smallest statement holding ``line``; the line alone when
    none does."""
    best: tuple[int, int] | None = None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
            span = (node.lineno, node.end_lineno or node.lineno)
            if best is None or span[1] - span[0] < best[1] - best[0]:
                best = span
    return best or (line, line)


def watched(fix: dict[str, Any], root: Path) -> list[dict[str, Any]]:
    """One row per patched change: its id, file (absolute) and the statements it must run."""
    rows = []
    for c in fix.get("changes") or []:
        if c.get("status") != "patched" or not c.get("diff") or not c.get("file"):
            continue
        path = (root / str(c["file"])).resolve()
        source = path.read_text()
        lines = source.splitlines()
        at = {located(lines, n, text) for n, text in changed(str(c["diff"]))}
        spans = sorted({statement_span(source, n) for n in at})
        rows.append({"id": c["id"], "summary": c.get("summary"), "file": str(path), "spans": spans})
    return rows


class _Tracer:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.lines: dict[str, set[int]] = {}
        for r in rows:
            r["ran"] = False
            for a, b in r["spans"]:
                self.lines.setdefault(r["file"], set()).update(range(a, b + 1))
        self.hit: dict[str, set[int]] = {f: set() for f in self.lines}
        self.left = len(rows)

    def global_trace(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code.co_filename in self.lines:
            return self.local_trace
        return None

    def local_trace(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            f = frame.f_code.co_filename
            if frame.f_lineno in self.lines[f]:
                self.hit[f].add(frame.f_lineno)
                self._update()
        return self.local_trace if self.left else None

    def _update(self) -> None:
        for r in self.rows:
            if not r["ran"] and all(
                any(n in self.hit[r["file"]] for n in range(a, b + 1)) for a, b in r["spans"]
            ):
                r["ran"] = True
                self.left -= 1
        if not self.left:
            sys.settrace(None)
            threading.settrace(None)  # type: ignore[arg-type]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fix", type=Path, required=True, help="fix --json output")
    ap.add_argument("--out", type=Path, required=True, help="where to write which patches ran")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    opts = ap.parse_args()
    rows = watched(json.loads(opts.fix.read_text()), Path.cwd())
    tracer = _Tracer(rows)
    main_pid = os.getpid()

    def write() -> None:
        if os.getpid() == main_pid:
            opts.out.write_text(json.dumps(rows))

    write()
    sys.argv = [opts.script, *opts.args]
    script = Path(opts.script).resolve()  # code objects named by the path the tracer watches
    sys.path.insert(0, str(script.parent))
    if rows:
        threading.settrace(tracer.global_trace)
        sys.settrace(tracer.global_trace)
    code = 0
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.settrace(None)
        write()
    return code


if __name__ == "__main__":
    sys.exit(main())
