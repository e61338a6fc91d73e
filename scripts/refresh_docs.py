"""Regenerate (or check) every command-output block in README.md and docs/*.md.

Convention: a line ``<!-- refresh: COMMAND -->`` directly above a fenced block marks the block as
the output of COMMAND, run from the repository root by ``bash -c`` (so ``| head -20`` trims it).
A first line ``$ ...`` inside the block (the command as a user types it) is kept as it is.

    python scripts/refresh_docs.py              # run every command, rewrite its block
    python scripts/refresh_docs.py --check      # exit 1 when a block no longer matches
    python scripts/refresh_docs.py --only tune  # only blocks whose command contains "tune"

``--check`` compares shapes, not measurements. A line's shape: numbers become ``#`` and runs of
spaces and of table rules collapse, and a ranked finding's grade (``1. critical``, ``warning``
or ``info``: graded on its measured share) becomes ``<grade>``; then a table's header keeps its text (the column names), a
table row keeps only its number of columns, and any other line with a ``label: value`` keeps its
label. Every block line's shape must appear in the output in the same order (a ``...`` line in the
block stands for any lines). So a renamed label or column, a dropped line or a new column fails
the check; a different step time, or which configuration won, does not.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!--\s*refresh:\s*(?P<cmd>.+?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<fence>```+|~~~+)")
ELLIPSIS = {"...", "…"}
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*)?\.?\d+(?:[eE][-+]?\d+)?")
_RULE = re.compile(r"([━─═┄╌\-])\1+")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Block:
    """One marked output block of a markdown file."""

    path: Path
    command: str
    start: int
    """Index of the opening fence line."""
    end: int
    """Index of the closing fence line."""
    lines: tuple[str, ...]
    """The block's content lines (without the fences)."""


def find_blocks(path: Path, text: str | None = None) -> list[Block]:
    """Every fenced block directly under a refresh marker in ``path`` (an unclosed one raises)."""
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
    blocks = []
    for i, line in enumerate(lines[:-1]):
        m = MARKER.match(line)
        fence = FENCE.match(lines[i + 1]) if m else None
        if m is None or fence is None:
            continue
        close = next(
            (j for j in range(i + 2, len(lines)) if lines[j].strip() == fence.group("fence")),
            None,
        )
        if close is None:
            raise ValueError(f"{path}:{i + 2}: output block never closed")
        blocks.append(Block(path, m.group("cmd"), i + 1, close, tuple(lines[i + 2 : close])))
    return blocks


_GRADE = re.compile(r"^(\s*#\. )(?:critical|warning|info)\b")
"""A ranked finding's grade (after numbers became ``#``): it follows the measured share, which
moves with the machine's load like the numbers do."""


def normalize(line: str) -> str:
    """A line's text with numbers as ``#``, table rules and runs of spaces collapsed."""
    out = _NUMBER.sub("#", line.rstrip())
    out = _GRADE.sub(r"\1<grade>", out)
    out = _RULE.sub(r"\1", out)
    return _SPACE.sub(" ", out).strip()


def shape(line: str) -> str:
    """What ``--check`` compares (see the module docstring)."""
    text = normalize(line)
    if text.startswith("│") or text.startswith("|"):
        return "│" * max(text.count("│"), text.count("|"))  # a table row: its columns
    if "┃" in text or "━" in text or ": " not in text:
        return text
    return text.split(": ", 1)[0] + ":"


def mismatch(block_lines: Sequence[str], output_lines: Sequence[str]) -> str | None:
    """None when every block line appears, in order, in the output (shapes compared); else the
    first block line that does not."""
    wanted = [shape(x) for x in block_lines if x.strip() not in ELLIPSIS and not x.startswith("$ ")]
    got = iter(shape(x) for x in output_lines)
    for line in wanted:
        if not line:
            continue
        if not any(line == g for g in got):
            return line
    return None


def run(command: str, timeout_s: float) -> list[str]:
    """The command's output lines (stdout and stderr as one stream), run from the repo root."""
    env = {**os.environ, "COLUMNS": os.environ.get("COLUMNS", "100"), "NO_COLOR": "1"}
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in the order a terminal shows it
        text=True,
        timeout=timeout_s,
    )
    if done.returncode not in (0, 141):  # 141: SIGPIPE from "| head"
        tail = done.stdout.strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"exit status {done.returncode}: {tail[0][:200]}")
    return done.stdout.splitlines()


def rewrite(path: Path, blocks: Iterable[Block], outputs: dict[int, list[str]]) -> None:
    """Replace each block's content by its new output, keeping a leading ``$ ...`` line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for block in sorted(blocks, key=lambda b: -b.start):
        new = outputs.get(block.start)
        if new is None:
            continue
        keep = [block.lines[0]] if block.lines and block.lines[0].startswith("$ ") else []
        lines[block.start + 1 : block.end] = keep + [x.rstrip() for x in new]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def doc_files(root: Path | None = None) -> list[Path]:
    """README.md and docs/*.md of ``root`` (the repository root by default)."""
    root = root or ROOT
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.exists()]


def main(argv: Sequence[str] | None = None) -> int:
    """Check or rewrite the blocks; returns the exit status (1: a check failed or a run broke)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="compare, do not rewrite")
    p.add_argument("--only", default="", help="only commands containing this text")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per command")
    args = p.parse_args(argv)
    failed = 0
    for path in doc_files():
        blocks = [b for b in find_blocks(path) if args.only in b.command]
        outputs: dict[int, list[str]] = {}
        for block in blocks:
            where = f"{path.relative_to(ROOT)}:{block.start}"  # the marker line, 1-based
            try:
                out = run(block.command, args.timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"{where}: {block.command}: {exc}", file=sys.stderr)
                failed += 1
                continue
            bad = mismatch(block.lines, out) if args.check else None
            if bad is not None:
                print(f"{where}: {block.command}: no longer printed: {bad!r}", file=sys.stderr)
                failed += 1
            outputs[block.start] = out
            print(f"{where}: {block.command}: {'ok' if bad is None else 'differs'}")
        if not args.check and outputs:
            rewrite(path, blocks, outputs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
