"""torchdoctor never blames its own code: call sites, graph breaks and recompile sites that
point into this package are removed from the record before any rule sees them, and counted
under ``own_frames`` so that a test (or a bug report) can see that it happened.

Plain data only (no torch), so it runs on a finished record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchdoctor.code_paths import code_paths
from torchdoctor.record.write import without_sites


def is_ours(site: str | None) -> bool:
    """True for a ``file:line`` (or a bare file name) inside torchdoctor's package."""
    if not site:
        return False
    path = site.rsplit(":", 1)[0] if site.rsplit(":", 1)[-1].isdigit() else site
    path = path.split(" (", 1)[0]
    if not path.endswith(".py"):  # an operator name or a generated frame, not a file of ours
        return False
    return code_paths().label(path) == "torchdoctor"


def scrub(record: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``record`` without the rows whose site is torchdoctor's own (``record`` is left
    as it is; ``record/write.py``'s ``without_sites`` knows where the sites are).

    The copy's ``own_frames`` lists what was removed, by section; empty when nothing was.
    """
    kept, removed = without_sites(record, is_ours)
    return {**kept, "own_frames": removed}
