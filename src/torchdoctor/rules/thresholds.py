"""Thresholds the trace rules use, each with the reason it sits where it does.

Shares are fractions of the mean step time. A rule fires at ``*_WARN`` and becomes critical at
``*_CRITICAL``. They are deliberately round numbers: the evidence printed with each finding lets a
user judge a borderline case, and docs/rules.md lists them all.
"""

from __future__ import annotations

DATA_WARN = 0.05
"""Data loading visible for 5% of the step: workers or prefetch usually remove all of it."""
DATA_CRITICAL = 0.25

HOST_WARN = 0.10
"""GPU waiting on late launches for 10% of the step: compile/CUDA graphs usually pay above it."""
HOST_CRITICAL = 0.30

SYNC_WARN = 0.02
"""Synchronisation stalls of 2% of the step: each is a drained queue, cheap to remove."""
SYNC_MIN_MS = 0.05
"""...and at least 50 µs per step, so one end-of-run synchronize does not fire the rule."""
SYNC_CRITICAL = 0.15

PAGEABLE_MIN_BYTES = 1 << 20
"""Pageable host-to-device copies of 1 MiB or more per step (smaller ones cost little)."""
PINNED_SPEEDUP = 2.0
"""Pinned copies reach about twice the bandwidth of pageable ones and run asynchronously."""

EXPOSED_COMM_WARN = 0.05
"""Communication the step waits for, above 5%: DDP can normally hide it under backward."""
EXPOSED_COMM_CRITICAL = 0.20

LOW_UTIL_BUSY = 0.60
"""GPU busy under 60% of the step is low utilisation for a training or inference loop."""

FP32_GEMM_SHARE = 0.50
"""Half or more of GEMM/convolution time in fp32 SIMT kernels on a tensor-core GPU."""
MATMUL_MIN_SHARE = 0.20
"""...and GEMM/convolution at least 20% of GPU time, so the change matters."""
TENSOR_CORE_SPEEDUP = 2.0
"""A conservative speed-up for moving fp32 GEMMs to tensor cores (peak ratios are 8-16x)."""

MEMORY_PRESSURE = 0.90
"""Peak reserved memory above 90% of the device: the next size up will not fit."""
FRAGMENTATION = 0.30
"""Reserved-but-unallocated above 30% of reserved at the peak: expandable segments help."""
FRAGMENTATION_MIN_BYTES = 1 << 30

STRAGGLER = 0.10
"""A rank whose step is 10% slower than the median makes every other rank wait."""
