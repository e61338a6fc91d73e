"""Whether two ``check`` run records have the same shape: the same keys in the same order, and
values of the same JSON types, ignoring what varies from run to run (timings).

A change to how the record is built (a watcher handing over a typed row instead of a dict)
should leave ``run.json`` as it was; run ``check`` on the same scripts before and after and
compare:

    python scripts/run_record_shape.py BEFORE AFTER [--section config --section compile]

BEFORE and AFTER are ``run.json`` files or folders searched for them (pairs matched by the
record's ``script``). Prints each difference (a key missing, added or moved, a value of another
type, a list of another length) and, for the values that are not floats (counts, names, flags),
how many are equal and which differ; floats are timings here and are only typed. A float where
the other record has None (or an int) is a type difference: a ``None`` time is a step that was
not measured, worth seeing. Exits 1 when the shapes differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "object"}.get(
        type(v), type(v).__name__
    )


def differences(a: Any, b: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """``(kind, text)`` for each place ``a`` and ``b`` differ: ``shape`` (keys, order, types,
    lengths), ``value`` (a non-float scalar), ``equal`` (a non-float scalar that matched)."""
    if _kind(a) != _kind(b):
        yield "shape", f"{path or '.'}: {_kind(a)} -> {_kind(b)}"
    elif isinstance(a, dict):
        if list(a) != list(b):
            gone, new = [k for k in a if k not in b], [k for k in b if k not in a]
            text = f"{path or '.'}: keys"
            text += f" missing {gone}" if gone else ""
            text += f" added {new}" if new else ""
            if not gone and not new:
                text += f" reordered {list(a)} -> {list(b)}"
            yield "shape", text
        for k in a:
            if k in b:
                yield from differences(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        if len(a) != len(b):
            yield "shape", f"{path}: {len(a)} items -> {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from differences(x, y, f"{path}[{i}]")
    elif not isinstance(a, float):
        yield ("equal", path) if a == b else ("value", f"{path}: {a!r} -> {b!r}")


def _records(where: Path) -> dict[str, dict[str, Any]]:
    files = [where] if where.is_file() else sorted(where.rglob("run.json"))
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        doc = json.loads(f.read_text(encoding="utf-8"))
        out[Path(str(doc.get("script", f))).name if where.is_dir() else "run.json"] = doc
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument(
        "--section", action="append", default=[], help="top-level key to compare (default: all)"
    )
    args = ap.parse_args(argv)
    before, after = _records(args.before), _records(args.after)
    shaped = 0
    for name in sorted(set(before) | set(after)):
        if name not in before or name not in after:
            print(f"{name}: only in {'after' if name in after else 'before'}")
            shaped += 1
            continue
        a, b = before[name], after[name]
        if args.section:
            a = {k: a[k] for k in args.section if k in a}
            b = {k: b[k] for k in args.section if k in b}
        found = list(differences(a, b))
        equal = sum(kind == "equal" for kind, _ in found)
        other = [f"{kind}: {text}" for kind, text in found if kind != "equal"]
        shaped += sum(kind == "shape" for kind, _ in found)
        print(f"{name}: {equal} values equal, {len(other)} differences")
        for text in other:
            print(f"  {text}")
    return 1 if shaped else 0


if __name__ == "__main__":
    sys.exit(main())
