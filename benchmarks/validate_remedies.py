"""Every remedy ``check`` prints as code, pasted where it points, run: does the pasted program
run, does the pasted code execute, and is the mistake gone?

    python benchmarks/validate_remedies.py                        # the held-out set
    python benchmarks/validate_remedies.py --set heldout,unlisted --cases eval_with_grad.py
    python benchmarks/validate_remedies.py --set check,fix --json rows.json

Sets: ``heldout`` (examples/heldout: written blind, kept apart), ``unlisted``
(examples/unlisted), ``check`` (examples/check), ``fix`` (examples/fix). Each case is copied with
its folder's helpers (``_*.py``) to a scratch folder; nothing in the repository is written.

Per case: ``check --warmup 3 --steps 3`` (the case's environment: one intra-op thread unless the
case is about threads; a healthy control runs with the threads the environment gives, since a
forced ``OMP_NUM_THREADS=1`` on a machine with idle cores is itself a mistake ``check`` rightly
names). Every warning or critical finding is then taken in turn:

- its fix text's code lines are the lines that are not comments. None: the remedy is advice
  (it says what to change and where), not pasted. Code that does not parse as Python is a
  command (an environment variable, a launcher), not pasted either.
- where: the ``# at FILE:LINE`` the fix text names, else the finding's first ``where`` that is a
  file:line; "at the top of the script" is after the script's imports. A place outside the
  case's own files (torch, a library) is not pasted ("elsewhere").
- a fix whose statements name places of their own is pasted piece by piece, each at its
  place; a piece with no place of its own is left out (the row says how many).
- the paste rule, from what the report's wording promises:
  *wrap*: a ``with ...:`` header over a body that repeats the user's statement at that line
  ("around the user's own line") replaces that statement by the header and the statement;
  *replace*: code under "in place of the line at FILE:LINE" replaces that line's statement;
  a single call (or assignment) whose callee (or target) is the one at that line
  ("the user's own call with only what changes") replaces that call (or statement);
  *move*: the user's own line with "move this line before the loop" is taken out of the
  innermost loop around it and put right before that loop (a line in no loop of its function,
  e.g. a module's ``forward`` told "move this line to __init__", is an instruction, counted
  as advice);
  *insert*: code "before the line at FILE:LINE" goes right before that line's statement (the
  statement holding it: ``mark_dynamic`` before the compiled model's call), at its indentation;
  code "after the line at FILE:LINE" goes right after that line's statement, and so
  does anything else ("at the line that turned it on": it runs after it and undoes it), at
  its indentation; after a block's header (``with``, ``for``, ``def``) it becomes the first
  lines of the block.
- the pasted program is run plainly (time-limited) under a line tracer that records whether the
  pasted lines ran ("executes": a line the tracer saw, or a line of a function ``torch.compile``
  traced when it was called, which runs as a compiled graph the tracer cannot see; a torch
  without dynamo's bytecode hooks sees only the first); it "fails" when it exits non-zero where
  the original did not.
- ``check`` is run again on it: the mistake is "left" when the same finding id is still a
  warning or critical. Then the row keeps that finding's severity and fix after the paste
  (``after_severity``, ``after_fix``) and says which of two it is (``left``): "same remedy",
  the same code lines (comments and their numbers aside) at the same places, each place read
  back on the script as it was (a pasted line stands for the line it was pasted at): the fix
  did not hold, a defect; or "next step", a different fix or place: the planted mistake is
  gone and a different limit is left. The headline counts both.

A case with a planted mistake and no warning or critical finding is a false clean bill, unless
the mistake's own finding is there as info (a mode measured too cheap to fix on this machine, or
not measured): that is counted apart. A healthy control with a warning or critical is noisy. The last line is the headline.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import heldout_cases
import unlisted_cases
from unlisted_cases import Case, harness_env, run_case

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(os.environ.get("TD_SRC") or ROOT / "src")
"""The torchdoctor to run (TD_SRC: another checkout's ``src``, e.g. a snapshot of a commit)."""
FAST = ["--warmup", "3", "--steps", "3"]
_AT = re.compile(
    r"(?:#\s*(?:at|now at)|(?:in place of|after|before) the line at)\s+(?P<path>\S+?\.py):(?P<line>\d+)"
)
_WHERE = re.compile(r"^(?P<path>.+?\.py):(?P<line>\d+)$")
_TOP = "at the top of the script"
PASTED = ("wrap", "replace", "insert", "move")
"""Kinds of paste; a fix of several pieces pasted at their own places joins them with +."""

RUNNER = '''"""Run a script as __main__ and record which of the given lines of a file ran.

A frame torch.compile traces runs a compiled graph, not its lines: once torch._dynamo is
loaded (the script imports it; it is never imported here), a bytecode hook counts the lines of
each frame of the file that dynamo traced (a frame is traced when it is called)."""
import atexit, dis, json, os, runpy, sys
target, lines, out, script = sys.argv[1], set(json.loads(sys.argv[2])), sys.argv[3], sys.argv[4]
hit = set()
hooked = []
def _traced(code, new_code):
    try:
        if code.co_filename == target:
            hit.update(ln for _, ln in dis.findlinestarts(code) if ln in lines)
    except Exception:
        pass
    return None
def _hook():
    frames = getattr(sys.modules.get("torch._dynamo"), "convert_frame", None)
    if frames is not None:
        hooked.append(frames)
        try:
            frames.register_bytecode_hook(_traced)
        except Exception:
            pass  # a torch without the hook: lines dynamo traces are not seen
def _local(frame, event, arg):
    if event == "line" and frame.f_lineno in lines:
        hit.add(frame.f_lineno)
    return _local
def _global(frame, event, arg):
    if not hooked:
        _hook()
    return _local if frame.f_code.co_filename == target else None
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(hit))))
if lines:
    import threading
    sys.settrace(_global)
    threading.settrace(_global)
sys.path[0] = os.path.dirname(script)
sys.argv = [script, *sys.argv[5:]]
runpy.run_path(script, run_name="__main__")
'''


@dataclass
class Remedy:
    """One warning or critical finding's printed fix and what pasting it did."""

    finding: str
    severity: str
    kind: str = ""
    """wrap, replace, insert, move (pasted); advice, command, elsewhere, unplaced (not)."""
    place: str = ""
    error: str = ""
    runs: bool | None = None
    executed: bool | None = None
    gone: bool | None = None
    after_ids: list[str] = field(default_factory=list)
    left: str | None = None
    """When the finding is still reported after the paste: "same remedy" (its fix prints the same
    code at the same place again: the fix did not hold) or "next step" (a different fix or
    place: the planted mistake is gone and a different limit is left)."""
    after_severity: str = ""
    after_fix: str = ""
    """The same finding's severity and fix text in the report after the paste."""

    @property
    def pasted(self) -> bool:
        return any(k in PASTED for k in self.kind.split("+"))


# --- the paste rule -------------------------------------------------------------------------


def code_lines(fix: str) -> list[str]:
    """The fix's lines that are code: neither empty nor a comment."""
    return [ln for ln in fix.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def _strip_comment(line: str) -> str:
    """A code line without its trailing ``  # ...`` comment."""
    return line.split("  #", 1)[0].rstrip()


def target_of(fix: str, where: list[str], work: Path, script: Path) -> tuple[Path, int] | str:
    """The file and line a remedy is to be pasted at, or why there is none."""
    m = _AT.search(fix)
    spot = (m.group("path"), int(m.group("line"))) if m else None
    if spot is None:
        for w in where:
            wm = _WHERE.match(w)
            if wm:
                spot = (wm.group("path"), int(wm.group("line")))
                break
    if spot is None:
        return "top" if _TOP in fix else "unplaced"
    path = Path(spot[0])
    path = path if path.is_absolute() else work / path
    if not path.is_file() or path.parent.name.startswith("td-remedy-"):
        # the report names the scratch copy ``check`` ran: the same file in this copy
        alt = work / path.name
        path = alt if alt.is_file() else path
    try:
        path.resolve().relative_to(work.resolve())
    except ValueError:
        return "elsewhere"
    return (path, spot[1]) if path.is_file() else "elsewhere"


def _statement_at(tree: ast.Module, line: int) -> ast.stmt | None:
    best: ast.stmt | None = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        span = (node.end_lineno or node.lineno) - node.lineno
        if node.lineno <= line <= node.lineno + span and (
            best is None or span <= (best.end_lineno or best.lineno) - best.lineno
        ):
            best = node
    return best


def _after_imports(tree: ast.Module) -> int:
    last = 0
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom) or (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        ):
            last = node.end_lineno or node.lineno
        else:
            break
    return last


def _norm(text: str) -> str:
    return re.sub(r"\s+", "", text)


class NotMechanical(ValueError):
    """The text says what to change (move a line to ``__init__``), not code to paste as is."""


def _move(
    lines: list[str], tree: ast.Module, stmt: ast.stmt, code: str
) -> tuple[str, str, list[int]] | None:
    """ "Move this line before the loop": the user's statement taken out of the innermost loop
    around it (in its own function) and put right before that loop."""
    if "move this line" not in code or len(code.splitlines()) != 1:
        return None
    try:
        mine = ast.unparse(ast.parse(_strip_comment(code)))
    except SyntaxError:
        return None
    if _norm(mine) != _norm(ast.unparse(stmt)):
        return None
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    node: ast.AST = stmt
    loop: ast.stmt | None = None
    while id(node) in parents:
        node = parents[id(node)]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            break
        if isinstance(node, ast.For | ast.While):
            loop = node
            break
    if loop is None:
        raise NotMechanical("no loop around the line in its function to move it out of")
    first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
    taken = lines[first - 1 : last]
    indent = re.match(r"\s*", lines[loop.lineno - 1]).group(0)  # type: ignore[union-attr]
    old = re.match(r"\s*", taken[0]).group(0)  # type: ignore[union-attr]
    moved = [indent + ln[len(old) :] if ln.startswith(old) else ln for ln in taken]
    block = next(
        (
            b
            for b in (getattr(parents[id(stmt)], f, None) for f in ("body", "orelse"))
            if b and stmt in b
        ),
        [],
    )
    keep = [old + "pass"] if len(block) == 1 else []  # a block left empty keeps a `pass`
    rest = [*lines[: first - 1], *keep, *lines[last:]]
    at = loop.lineno - 1
    out = [*rest[:at], *moved, *rest[at:]]
    return "move", "\n".join(out) + "\n", [at + 1]


def paste(source: str, fix: str, line: int | None) -> tuple[str, str, list[int]]:
    """(kind, the pasted source, the pasted lines' numbers) for ``fix`` at ``line`` (None: at
    the top of the script, after its imports). Raises ValueError when the place has no
    statement."""
    lines = source.splitlines()
    tree = ast.parse(source)
    code = textwrap.dedent("\n".join(code_lines(fix)))
    parsed = ast.parse(code)
    if line is None:
        at = _after_imports(tree)
        new = code.splitlines()
        return (
            "insert",
            "\n".join([*lines[:at], *new, *lines[at:]]) + "\n",
            list(range(at + 1, at + 1 + len(new))),
        )
    stmt = _statement_at(tree, line)
    if stmt is None:
        raise ValueError(f"no statement at line {line}")
    first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
    indent = re.match(r"\s*", lines[first - 1]).group(0)  # type: ignore[union-attr]
    user = "\n".join(lines[first - 1 : last])
    body = parsed.body
    moved = _move(lines, tree, stmt, code)
    if moved is not None:
        return moved
    if "in place of the line at" in fix:
        new = [indent + ln if ln.strip() else ln for ln in code.splitlines()]
        out = [*lines[: first - 1], *new, *lines[last:]]
        return "replace", "\n".join(out) + "\n", [first]
    if "before the line at" in fix:  # a new statement before the user's (a call it prepares)
        new = [indent + ln if ln.strip() else ln for ln in code.splitlines()]
        out = [*lines[: first - 1], *new, *lines[first - 1 :]]
        return "insert", "\n".join(out) + "\n", list(range(first, first + len(new)))
    if "after the line at" in fix:  # a new statement after the user's: never a replacement
        new = [indent + ln if ln.strip() else ln for ln in code.splitlines()]
        out = [*lines[:last], *new, *lines[last:]]
        return "insert", "\n".join(out) + "\n", list(range(last + 1, last + 1 + len(new)))
    # wrap: `with X:` over the user's own statement
    if (
        len(body) == 1
        and isinstance(body[0], ast.With)
        and not isinstance(stmt, ast.With | ast.For | ast.If | ast.While | ast.FunctionDef)
        and _norm(ast.unparse(ast.Module(body=body[0].body, type_ignores=[])))
        == _norm(ast.unparse(stmt))
    ):
        header = _strip_comment(code.splitlines()[0])
        new = [
            indent + header,
            *("    " + ln if ln.strip() else ln for ln in lines[first - 1 : last]),
        ]
        out = [*lines[: first - 1], *new, *lines[last:]]
        return "wrap", "\n".join(out) + "\n", [first]
    # replace: the same call, or an assignment to the same target
    if len(body) == 1:
        mine = body[0]
        if isinstance(mine, ast.Expr) and isinstance(mine.value, ast.Call):
            func = ast.unparse(mine.value.func)
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call) and ast.unparse(node.func) == func:
                    seg = ast.get_source_segment(source, node)
                    if seg is None:
                        break
                    replaced = user.replace(seg, ast.unparse(mine.value), 1)
                    if replaced == user and seg not in user:
                        break
                    out = [*lines[: first - 1], *replaced.splitlines(), *lines[last:]]
                    return "replace", "\n".join(out) + "\n", [first]
        if (
            isinstance(mine, ast.Assign)
            and isinstance(stmt, ast.Assign)
            and [ast.unparse(t) for t in mine.targets] == [ast.unparse(t) for t in stmt.targets]
        ):
            new = [indent + ln for ln in code.splitlines()]
            out = [*lines[: first - 1], *new, *lines[last:]]
            return "replace", "\n".join(out) + "\n", [first]
    # insert: after the statement, or first in the block whose header is at that line
    compound = getattr(stmt, "body", None)
    if compound and isinstance(compound, list) and line < compound[0].lineno:
        at = compound[0].lineno - 1
        indent = re.match(r"\s*", lines[at]).group(0)  # type: ignore[union-attr]
    else:
        at = last
    new = [indent + ln if ln.strip() else ln for ln in code.splitlines()]
    out = [*lines[:at], *new, *lines[at:]]
    return "insert", "\n".join(out) + "\n", list(range(at + 1, at + 1 + len(new)))


# --- the same remedy again? ------------------------------------------------------------------


def _mapped(before: list[str], after: list[str], line: int) -> int:
    """The line of ``before`` (the script as it was) that line ``line`` of ``after`` (the pasted
    script) stands for: the same line where the paste left it, else the first line of the
    stretch the paste replaced or put code before (the pasted lines stand for the place they
    were pasted at)."""
    for tag, i1, _i2, j1, j2 in difflib.SequenceMatcher(None, before, after).get_opcodes():
        if j1 < line <= j2:
            return i1 + (line - j1) if tag == "equal" else i1 + 1
    return line


def places(
    fix: str, where: list[str], work: Path, script: Path, pasted: dict[Path, str] | None = None
) -> list[str]:
    """Where each piece of ``fix`` points, as ``FILE:LINE`` of the script as it was (``pasted``:
    the files the paste changed, the original text of each, when ``fix`` is read from the
    report on the pasted program), or why it has no place (top, unplaced, elsewhere)."""
    parts = pieces(fix) or [fix]
    out = []
    for part in parts:
        spot = target_of(part, where if len(parts) == 1 else [], work, script)
        if isinstance(spot, str):
            out.append(spot)
            continue
        path, line = spot
        if pasted and path in pasted:
            line = _mapped(pasted[path].splitlines(), path.read_text().splitlines(), line)
        out.append(f"{path.name}:{line}")
    return out


def same_remedy(before: str, before_at: list[str], after: str, after_at: list[str]) -> bool:
    """The report after the paste prints the same remedy again: the same code lines (comments,
    with the numbers they quote, aside) at the same places."""

    def code(fix: str) -> list[str]:
        return [_norm(_strip_comment(ln)) for ln in code_lines(fix)]

    return code(before) == code(after) and before_at == after_at


# --- the runs --------------------------------------------------------------------------------


def _run(cmd: list[str], case: Case, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return run_case(cmd, case, cwd, timeout, SRC)


def _check(case: Case, script: Path, work: Path, name: str, timeout: float) -> dict[str, Any]:
    out = work / f"{name}.json"
    proc = _run(
        [sys.executable, "-m", "torchdoctor", "check", *FAST, "--json", str(out),
         "--out", str(work / "runs"), str(script)],
        case, work, timeout,
    )  # fmt: skip
    if not out.is_file():
        tail = (proc.stderr or "").strip().splitlines()[-1:]
        return {"error": tail[0] if tail else f"exit {proc.returncode}"}
    return json.loads(out.read_text())


SEVERITIES = ["warning", "critical"]
"""The findings whose remedies are pasted (``--info`` adds info: a mode measured cheap here)."""


def actionable(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's warning and critical findings."""
    return [f for f in report.get("findings") or [] if f.get("severity") in ("warning", "critical")]


def _pasted_findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report.get("findings") or [] if f.get("severity") in SEVERITIES]


def _plain(
    case: Case, script: Path, traced: Path, lines: list[int], work: Path, timeout: float
) -> tuple[int, list[int], str]:
    runner = work / "_td_paste_runner.py"
    runner.write_text(RUNNER)
    hits = work / "hits.json"
    hits.unlink(missing_ok=True)
    proc = _run(
        [sys.executable, str(runner), str(traced), json.dumps(lines), str(hits), str(script)],
        case, work, timeout,
    )  # fmt: skip
    ran = json.loads(hits.read_text()) if hits.is_file() else []
    err = (proc.stderr or "").strip().splitlines()[-1:]
    return proc.returncode, ran, err[0] if err else ""


def _scratch(case: Case) -> tuple[Path, Path]:
    work = Path(tempfile.mkdtemp(prefix="td-remedy-"))
    for helper in case.path.parent.glob("_*.py"):
        shutil.copy(helper, work / helper.name)
    shutil.copy(case.path, work / case.script)
    return work, work / case.script


def pieces(fix: str) -> list[str]:
    """A fix whose statements name places of their own (``torch.optim.SGD(..., fused=True)  #
    at t.py:18`` beside ``model = torch.compile(model)``): one text per statement, each pasted
    at its own place; [] when the fix is one piece."""
    rows = [ln for ln in fix.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    try:
        tree = ast.parse(textwrap.dedent("\n".join(rows)))
    except SyntaxError:
        return []
    if len(tree.body) < 2:
        return []
    out = ["\n".join(rows[s.lineno - 1 : s.end_lineno]) for s in tree.body]
    return out if any(_AT.search(p.splitlines()[0]) for p in out) else []


def _paste_all(
    fix: str, where: list[str], work: Path, script: Path
) -> tuple[str, Path, str, list[int], str] | str:
    """(kind, file, pasted source, pasted lines, place) of every placed piece of ``fix`` (in
    one file), or why nothing was pasted."""
    parts = pieces(fix) or [fix]
    placed = []
    for part in parts:
        spot = target_of(part, where if len(parts) == 1 else [], work, script)
        if spot in ("unplaced", "elsewhere"):
            continue
        placed.append((part, (script, None) if spot == "top" else spot))
    if not placed:
        return "unplaced" if len(parts) > 1 else str(target_of(fix, where, work, script))
    path = placed[0][1][0]
    placed = [p for p in placed if p[1][0] == path]
    source, kinds, at_all = path.read_text(), [], []  # type: ignore[union-attr]
    for part, (_, line) in sorted(placed, key=lambda p: -(p[1][1] or 0)):
        before = len(source.splitlines())
        kind, source, at = paste(source, part, line)
        delta = len(source.splitlines()) - before
        # the lines pasted before: moved down when this piece went in above them (before the
        # same line too, for a piece that goes before its line)
        first = (line or 0) + (0 if "before the line at" in part else 1)
        at_all = [a + delta if line is not None and a >= first else a for a in at_all] + at
        kinds.append(kind)
    place = ",".join(f"{path.name}:{ln or 'top'}" for _, (_, ln) in placed)  # type: ignore[union-attr]
    if len(placed) < len(parts):
        place += f" ({len(parts) - len(placed)} of {len(parts)} pieces unplaced)"
    return "+".join(sorted(set(kinds))), path, source, at_all, place  # type: ignore[return-value]


def _try_remedy(case: Case, finding: dict[str, Any], plain_rc: int, timeout: float) -> Remedy:
    rem = Remedy(finding["id"], finding["severity"])
    fix = finding.get("fix") or ""
    if not code_lines(fix):
        rem.kind = "advice"
        return rem
    try:
        ast.parse(textwrap.dedent("\n".join(code_lines(fix))))
    except SyntaxError:
        rem.kind = "command"
        return rem
    work, script = _scratch(case)
    try:
        done = _paste_all(fix, list(finding.get("where") or []), work, script)
    except NotMechanical as exc:
        rem.kind, rem.error = "advice", str(exc)
        return rem
    except (ValueError, SyntaxError) as exc:
        rem.kind, rem.error = "insert", f"cannot paste: {exc}"
        rem.runs = False
        return rem
    if isinstance(done, str):
        rem.kind = done
        return rem
    rem.kind, path, pasted, at, rem.place = done
    original = {path: path.read_text()}
    before_at = places(fix, list(finding.get("where") or []), work, script)
    path.write_text(pasted)
    try:
        compile(pasted, str(path), "exec")
    except SyntaxError as exc:
        rem.runs, rem.error = False, f"SyntaxError: {exc.msg} (line {exc.lineno})"
        return rem
    rc, ran, err = _plain(case, script, path.resolve(), at, work, timeout)
    rem.runs = not (rc != 0 and plain_rc == 0)
    rem.executed = bool(ran)
    if not rem.runs:
        rem.error = err
        return rem
    after = _check(case, script, work, "after", timeout)
    if "error" in after:
        rem.error = f"check after: {after['error']}"
        return rem
    rem.after_ids = [f["id"] for f in _pasted_findings(after)]
    rem.gone = finding["id"] not in rem.after_ids
    again = next((f for f in _pasted_findings(after) if f["id"] == finding["id"]), None)
    if again is not None:
        rem.after_severity, rem.after_fix = again["severity"], again.get("fix") or ""
        after_at = places(rem.after_fix, list(again.get("where") or []), work, script, original)
        same = same_remedy(fix, before_at, rem.after_fix, after_at)
        rem.left = "same remedy" if same else "next step"
    return rem


def one(case: Case, timeout: float) -> dict[str, Any]:
    """The row of one case (see the module docstring)."""
    case = harness_env(case)
    work, script = _scratch(case)
    plain_rc, _, _ = _plain(case, script, script.resolve(), [], work, timeout)
    report = _check(case, script, work, "before", timeout)
    row: dict[str, Any] = {
        "script": case.script,
        "control": case.control,
        "labelled": case.mistake != "?",
        "plain_rc": plain_rc,
    }
    if "error" in report:
        row["error"] = report["error"]
        return row
    found = actionable(report)
    row["ids"] = [f["id"] for f in found]
    row["named"] = any(f["id"] in case.expect for f in found)
    # named, as info only: a mode measured too cheap to fix here, or not measured (a loaded
    # machine); not a clean bill, counted apart
    row["named_info"] = any(f["id"] in case.expect for f in report.get("findings") or [])
    row["remedies"] = [
        _try_remedy(case, f, plain_rc, timeout).__dict__
        for f in _pasted_findings(report)
        if f in found or f["id"] in case.expect
    ]
    return row


# --- the sets --------------------------------------------------------------------------------


def _folder_cases(folder: str) -> tuple[Case, ...]:
    """Examples without labels: every script; ``well_tuned*`` and ``control_*`` are controls."""
    base = ROOT / "examples" / folder

    class FolderCase(Case):
        @property
        def path(self) -> Path:
            return base / self.script

    out = []
    for p in sorted(base.glob("*.py")):
        if p.name.startswith("_"):
            continue
        healthy = p.stem.startswith(("well_tuned", "control_"))
        # no planted mistake to name ("?"); the threads the environment gives (a forced
        # OMP_NUM_THREADS=1 would itself be a finding on a healthy example)
        out.append(FolderCase(p.name, "" if healthy else "?", (), "", env=()))
    return tuple(out)


def cases_of(sets: list[str]) -> list[tuple[str, Case]]:
    out: list[tuple[str, Case]] = []
    for name in sets:
        if name == "heldout":
            out += [(name, c) for c in heldout_cases.CASES]
        elif name == "unlisted":
            out += [(name, c) for c in unlisted_cases.CASES]
        elif name in ("check", "fix"):
            out += [(name, c) for c in _folder_cases(name)]
        else:
            raise SystemExit(f"unknown set {name!r}: heldout, unlisted, check, fix")
    return out


def _cell(rem: dict[str, Any]) -> str:
    if not any(k in PASTED for k in rem["kind"].split("+")):
        return rem["kind"]
    if rem["runs"] is False:
        return "FAILS"
    if rem["executed"] is False:
        return "NEVER RUNS"
    if rem["gone"] is None:
        return "ran; " + (rem["error"] or "?")
    if rem["gone"]:
        return "ok, gone"
    # rows written before the column: the finding's fix after the paste was not kept
    return f"ok, LEFT ({rem['left']})" if rem.get("left") else "ok, LEFT"


def summary(rows: list[dict[str, Any]]) -> str:
    """The headline: counts over every row."""
    rems = [r for row in rows for r in row.get("remedies") or []]
    pasted = [r for r in rems if any(k in PASTED for k in r["kind"].split("+"))]
    fails = sum(1 for r in pasted if r["runs"] is False)
    never = sum(1 for r in pasted if r["runs"] and r["executed"] is False)
    left = sum(1 for r in pasted if r["gone"] is False)
    same = sum(1 for r in pasted if r["gone"] is False and r.get("left") == "same remedy")
    step = sum(1 for r in pasted if r["gone"] is False and r.get("left") == "next step")
    advice = sum(1 for r in rems if r["kind"] == "advice")
    other = sum(1 for r in rems if r["kind"] in ("command", "elsewhere", "unplaced"))
    mistakes = [r for r in rows if r["labelled"] and not r["control"]]
    clean = sum(1 for r in mistakes if "ids" in r and not r["ids"] and not r["named_info"])
    named = sum(1 for r in mistakes if r.get("named"))
    noisy = sum(1 for r in rows if r["control"] and r.get("ids"))
    errors = sum(1 for r in rows if "error" in r)
    return (
        f"{len(rows)} cases: {len(pasted)} remedies pasted, {fails} fail to run, {never} never "
        f"execute, {left} leave the mistake ({same} left, same remedy; {step} left, next step); "
        f"{advice} advice only, {other} not pasteable "
        f"(command, elsewhere, unplaced); planted mistakes named {named} of {len(mistakes)}, "
        f"(as info only: {sum(1 for r in mistakes if r.get('named_info') and not r.get('ids'))}), false clean bills {clean}; noisy controls {noisy}; check errors {errors}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="heldout", help="comma-separated: heldout,unlisted,check,fix")
    ap.add_argument("--cases", default="", help="comma-separated script names (default: all)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument("--json", default=None, help="write the rows as JSON here")
    ap.add_argument(
        "--info",
        action="store_true",
        help="also paste the planted mistake's own finding when it is info (measured cheap or "
        "not measured on this machine); the mistake is then 'gone' when it is not reported again",
    )
    args = ap.parse_args(argv)
    if args.info:
        SEVERITIES.append("info")
    chosen = cases_of([s for s in args.set.split(",") if s])
    wanted = {c for c in args.cases.split(",") if c}
    unknown = wanted - {c.script for _, c in chosen}
    if unknown:
        print(f"unknown case(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    rows = []
    print(f"{'set':<9} {'case':<30} {'finding':<26} {'paste':<8} {'result'}")
    for set_name, case in chosen:
        if wanted and case.script not in wanted:
            continue
        row = {"set": set_name, **one(case, args.timeout)}
        rows.append(row)
        head = f"{set_name:<9} {case.script[:30]:<30}"
        if "error" in row:
            print(f"{head} {'(check failed)':<26} {'-':<8} {row['error'][:60]}", flush=True)
            continue
        if not row["remedies"]:
            verdict = "quiet (control)" if case.control else "CLEAN BILL"
            if row["named_info"]:
                verdict = "named as info only"
            if case.mistake == "?":
                verdict = "no warning"
            print(f"{head} {'-':<26} {'-':<8} {verdict}", flush=True)
        for rem in row["remedies"]:
            noisy = " (NOISY CONTROL)" if case.control else ""
            print(
                f"{head} {rem['finding'][:26]:<26} {rem['kind']:<8} {_cell(rem)}"
                f"{' ' + rem['error'][:70] if rem['error'] and rem['runs'] is False else ''}"
                f"{noisy}",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
