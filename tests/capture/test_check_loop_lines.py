"""``check`` on a per-element Python loop in the step: the finding that fires there is placed
at the loop's line and says to vectorise it, never compile or a fused optimizer. mask_loop.py
is the case the rule was written against; running_sum_loop.py was held out."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.capture.check_helpers import REPO, check_inprocess

FOLDER = REPO / "examples" / "unlisted"
OPTS = ["--warmup", "3", "--steps", "4"]


def _site(script: str, marker: str) -> str:
    lines = (FOLDER / script).read_text().splitlines()
    return f"{FOLDER / script}:{next(i for i, ln in enumerate(lines, 1) if marker in ln)}"


def _run(tmp_path: Path, script: str) -> Any:
    sys.path.insert(0, str(FOLDER))  # the scripts import their step timer
    try:
        return check_inprocess(tmp_path, FOLDER / script, "--steps", "40", opts=OPTS)
    finally:
        sys.path.remove(str(FOLDER))


def _paragraph(fix: str, line: str) -> str:
    """The lines of ``fix`` about ``line`` (``file:N:``): from its mention to the next line's,
    or all of ``fix`` when it names no line."""
    rows = fix.splitlines()
    starts = [i for i, r in enumerate(rows) if re.match(r"^# \S+\.py:\d+:", r)]
    mine = [i for i in starts if rows[i].startswith(f"# {line}")]
    if not mine:
        return fix
    end = next((i for i in starts if i > mine[0]), len(rows))
    return "\n".join(rows[mine[0] : end])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "advice"),
    [("mask_loop.py", "torch.arange"), ("running_sum_loop.py", "cumsum")],
)
def test_loop_line_is_the_place_and_the_fix(tmp_path: Path, script: str, advice: str) -> None:
    r = _run(tmp_path, script)
    assert r.code == 0, r.stderr
    site = _site(script, "# planted")
    at_line = [f for f in r.report["findings"] if f["where"] and f["where"][0] == site]
    assert at_line, r.stdout
    line = f"{script}:{site.rsplit(':', 1)[1]}:"
    for f in at_line:
        assert "Vectorise this loop" in f["fix"] and advice in f["fix"], f["fix"]
        # what it says of the loop line (a finding may also speak of other lines after it)
        said = _paragraph(f["fix"], line)
        assert "torch.compile" not in said and "fused=True" not in said, f["fix"]
    # what points at the loop line takes the top of the list
    assert r.report["findings"][0]["where"][:1] == [site], r.stdout
