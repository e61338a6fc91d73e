"""Units for people: on the ground floor, so any stage may print a size."""

from __future__ import annotations


def fmt_bytes(n: int) -> str:
    """Binary units, three significant figures: ``1.09 GiB``, ``147 MiB``, ``512 B``."""
    value, sign = float(abs(n)), "-" if n < 0 else ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            text = f"{value:.0f}" if unit == "B" or value >= 100 else f"{value:.3g}"
            return f"{sign}{text} {unit}"
        value /= 1024
    raise AssertionError
