"""``check`` on a per-element Python loop in the step: the finding that fires there is placed
at the loop's line and says to vectorise it, never compile or a fused optimizer. mask_loop.py
is the case the rule was written against; running_sum_loop.py was held out."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.capture.check_helpers import REPO, unlisted_check

FOLDER = REPO / "examples" / "unlisted"


def _site(script: str, marker: str) -> str:
    lines = (FOLDER / script).read_text().splitlines()
    return f"{FOLDER / script}:{next(i for i, ln in enumerate(lines, 1) if marker in ln)}"


def _run(shared_check: Callable[..., Any], script: str) -> Any:
    """The script's run that tests/capture/test_check_unlisted.py names the mistake of."""
    return unlisted_check(shared_check, FOLDER / script)


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
def test_loop_line_is_the_place_and_the_fix(
    shared_check: Callable[..., Any], script: str, advice: str
) -> None:
    r = _run(shared_check, script)
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
