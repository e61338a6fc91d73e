"""A finding's evidence as one short line of ``key=value`` for the terminal.

The JSON keeps the evidence exact; the text shows what a reader can take in: shares as
percentages, whole counts without ``.0``, yes/no for flags, no ``None``, lists and mappings cut
to their first items with a count of the rest, long strings (kernel names) shortened from the
middle.
"""

from __future__ import annotations

from typing import Any

from torchdoctor.report.layout import middle

_LIST_ITEMS = 3
_DICT_ITEMS = 4
_TEXT = 60  # the longest a string is shown at the top level
_NESTED_TEXT = 40  # and inside a list or mapping


def evidence_line(evidence: dict[str, Any]) -> str:
    """``k=v, k=v, ...`` for every item whose value is not None."""
    return ", ".join(
        f"{k}={_value(v, share=_is_share(k))}" for k, v in evidence.items() if v is not None
    )


def evidence_value(key: Any, v: Any) -> str:
    """One evidence value as ``evidence_line`` shows it, without the brackets around a top-level
    list or mapping (a table cell of its own, as the HTML page shows it)."""
    text = _value(v, share=_is_share(key))
    return text[1:-1] if isinstance(v, dict | list | tuple) else text


def _is_share(key: Any) -> bool:
    return "share" in str(key)


def _value(v: Any, share: bool = False, depth: int = 0) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        return _percent(float(v)) if share and 0 <= v <= 1 else _number(float(v))
    if isinstance(v, dict):
        items = [(k, x) for k, x in v.items() if x is not None]
        shown = ", ".join(
            f"{k}: {_value(x, _is_share(k), depth + 1)}" for k, x in items[:_DICT_ITEMS]
        )
        return "{" + shown + _more(len(items) - _DICT_ITEMS) + "}"
    if isinstance(v, list | tuple):
        shown = ", ".join(_value(x, share, depth + 1) for x in v[:_LIST_ITEMS])
        return "[" + shown + _more(len(v) - _LIST_ITEMS) + "]"
    return middle(str(v), _TEXT if depth == 0 else _NESTED_TEXT)


def _more(n: int) -> str:
    return f", … {n} more" if n > 0 else ""


def _number(x: float) -> str:
    """A whole number without ``.0``, others to 4 significant digits, never in e-notation
    unless tiny."""
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    if abs(x) >= 10_000:
        return f"{x:.0f}"
    if abs(x) >= 1e-3:
        return f"{x:.4g}"
    return f"{x:.2g}"


def _percent(share: float) -> str:
    """A share of 1 as a percentage: one decimal, more for shares under 0.1%."""
    p = share * 100
    if p == 0 or p >= 0.1:
        return f"{p:.1f}%"
    return f"{p:.2g}%"
