"""The validation table of docs/validation.md from the JSON files the two harnesses write:

python benchmarks/validate_unlisted.py --before OLD/src --json before.json
python benchmarks/validate_unlisted.py --json after.json
python benchmarks/bench_unlisted_ab.py --json ab.json
python benchmarks/unlisted_table.py before.json after.json ab.json [more ab.json ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _load(paths: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in paths:
        rows.extend(json.loads(Path(p).read_text()))
    return rows


def _finding(r: dict[str, Any] | None) -> str:
    if not r or r.get("error"):
        return "(run failed)" if r else "not measured"
    if not r.get("top"):
        verdict = str(r.get("verdict") or "")
        return "none: " + (
            "not a clean bill" if "Not a clean bill" in verdict else '"no bottleneck"'
        )
    return f"`{r['top']}` ({r['top_share']:.0%})"


def main() -> None:
    before = {r["script"]: r for r in _load([sys.argv[1]])}
    after = {r["script"]: r for r in _load([sys.argv[2]])}
    ab = {r["script"]: r for r in _load(sys.argv[3:])}
    print(
        "| script | planted mistake | before: top finding | after: top finding | names it | line | gain of the hand fix (A/B, per-round range) |"
    )
    print("|---|---|---|---|---|---|---|")
    for script, a in after.items():
        b = before.get(script)
        g = ab.get(script)
        gain = (
            "not measured"
            if g is None
            else f"{g['gain']:.2f}x ({g['gain_min']:.2f}-{g['gain_max']:.2f})"
        )
        named = "yes" if a.get("named") else "no"
        if a.get("mistake") == "(healthy control)":
            named = "quiet" if a.get("ok") else "NOT quiet"
            gain = "n/a (no mistake)"
        line = "yes" if a.get("points_at_line") else "no"
        print(
            f"| `{script}` | {a.get('mistake')} | {_finding(b)} | {_finding(a)} | {named} | "
            f"{line} | {gain} |"
        )


if __name__ == "__main__":
    main()
