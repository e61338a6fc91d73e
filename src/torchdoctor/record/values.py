"""Reading plain values out of a recorded JSON document, tolerant of a missing or malformed
field: the one set of helpers behind every typed read of ``run.json`` and ``report.json``."""

from __future__ import annotations

import math
from typing import Any, TypeVar, overload

T = TypeVar("T")


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a dict, else ``{}``."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a list, else ``[]``."""
    return value if isinstance(value, list) else []


def as_rows(value: Any) -> list[dict[str, Any]]:
    """The dicts of a list (``[]`` when ``value`` is not a list)."""
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def as_number(value: Any) -> float | None:
    """A number (never a bool) as a float, else None."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def as_float(value: Any, default: float = 0.0) -> float:
    """A number as a float, else ``default``."""
    got = as_number(value)
    return default if got is None else got


def as_int(value: Any) -> int | None:
    """An int (never a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@overload
def as_count(value: Any) -> int: ...
@overload
def as_count(value: Any, default: T) -> int | T: ...
def as_count(value: Any, default: Any = 0) -> Any:
    """A finite number as an int (a float truncated), else ``default``."""
    got = as_number(value)
    return int(got) if got is not None and math.isfinite(got) else default
