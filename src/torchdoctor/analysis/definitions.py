"""Definitions the analysis owns: what counts as device latency rather than a wait.

The rules read these (``rules/thresholds.py`` re-exports them beside its own thresholds); the
analysis never imports from ``rules/``.
"""

from __future__ import annotations

from torchdoctor.threshold import Threshold

KERNEL_LATENCY_US = Threshold(
    100.0,
    "queued work that starts within 100 us of the device going idle is kernel-to-kernel latency. "
    "On the 14 GPU traces of the corpus (V100, A100, H100, MI250) such gaps fall in two groups: "
    "55 us or less (medians 1-15 us, 99th percentiles 7-22 us) and 147 us or more (waits on a "
    "dependency); 100 us sits in the valley. HTA's 30 us would call about a hundred 30-55 us "
    "latencies on V100/A100 dependency waits.",
)
