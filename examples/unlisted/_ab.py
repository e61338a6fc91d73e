"""Step timing for the interleaved A/B of ``benchmarks/bench_unlisted_ab.py``: each script
calls ``tick()`` at the end of every step; with ``TD_AB_TIMING=1`` the median of the steps after
the first ``warmup`` is printed on standard error as one JSON line. A no-op otherwise."""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from statistics import median

_times: list[float] = []
_last = [time.perf_counter()]


def tick() -> None:
    """End of one step."""
    now = time.perf_counter()
    _times.append(now - _last[0])
    _last[0] = now


def _report(warmup: int = 5) -> None:
    if os.environ.get("TD_AB_TIMING") and len(_times) > warmup:
        steady = _times[warmup:]
        print(
            json.dumps({"median_step_ms": median(steady) * 1e3, "steps": len(steady)}),
            file=sys.stderr,
        )


atexit.register(_report)
