"""What ``analyze`` imports of the run-only families: their modules load (the registry lists
every spec), but what only their measure and fix functions need (``torchdoctor.ab`` with
statistics and fractions, ``analysis/memory_growth.py``) waits until a check run is judged."""

from __future__ import annotations

import json
import subprocess
import sys

_ANALYZE = """
import json, sys
from torchdoctor.commands.analyze import trace
print(json.dumps(sorted(sys.modules)))
"""

_RUN_ONLY = {"torchdoctor.ab", "torchdoctor.stats", "torchdoctor.analysis.memory_growth"}


def test_analyze_imports_no_run_only_measurement_modules() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _ANALYZE], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    # the probe saw the families load: the run-only modules themselves are still imported
    assert {"torchdoctor.rules.families.compiler", "torchdoctor.rules.families.memory_growth"} <= (
        loaded
    )
    assert not loaded & _RUN_ONLY, sorted(loaded & _RUN_ONLY)


def test_run_only_measurements_still_find_their_modules() -> None:
    from torchdoctor.rules.families import compiler, memory_growth

    assert compiler._repaid_after(1000.0, 10.0) == 100.0
    assert "MiB" in memory_growth.growth_fix([], [{"where": "a.py:3", "bytes": 3 * 2**20}])
