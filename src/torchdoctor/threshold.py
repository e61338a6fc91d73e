"""A number with the reason it was chosen, on the ground floor: the analysis, the memory
judgement and the rules all define their thresholds with it."""

from __future__ import annotations


class Threshold(float):
    """A number with the reason it was chosen (``float(t)`` is the value, ``t.reason`` the why)."""

    reason: str

    def __new__(cls, value: float, reason: str) -> Threshold:
        obj = super().__new__(cls, value)
        obj.reason = reason
        return obj

    def __getnewargs__(self) -> tuple[float, str]:  # type: ignore[override]
        # copy, deepcopy and pickle rebuild it with its reason
        return (float(self), self.reason)
