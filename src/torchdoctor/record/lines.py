"""The line table of a ``check`` record (``run.json``'s ``lines``), typed: where the measured
steps' wall time went, by the user's own source line, as ``capture/line_table.py`` wrote it.

Plain data; a missing or malformed field reads as its empty default, so a record written before
a field existed still reads (a row of an older record has no ``calls``: it says nothing about
the library calls under it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchdoctor.record.values import as_float, as_number

_f = as_float


def _pairs(value: Any) -> tuple[tuple[str, float], ...]:
    """``[[name, ms], ...]`` as a tuple of pairs (malformed entries left out)."""
    if not isinstance(value, list):
        return ()
    out = []
    for item in value:
        if isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[0], str):
            out.append((item[0], _f(item[1])))
    return tuple(out)


def _ms(value: Any) -> dict[str, float]:
    return {str(k): _f(v) for k, v in value.items()} if isinstance(value, dict) else {}


@dataclass(frozen=True)
class LineRow:
    """One user source line: its self time (sampled with it innermost) and inclusive time (it
    anywhere on the stack), in ms per step, and what ran under its self time."""

    site: str
    """``file:line``."""
    function: str = ""
    """The function the line is in (``<module>`` at a script's top level)."""
    code: str = ""
    self_ms: float = 0.0
    inclusive_ms: float = 0.0
    self_share: float | None = None
    """The self time's share of the sampled step time; None when not recorded."""
    under: dict[str, float] = field(default_factory=dict)
    """ms per step of the self time by category (``torch ops``, ``Python``, ``I/O``...)."""
    ops: tuple[tuple[str, float], ...] = ()
    """The torch operators running under the self time, most first."""
    calls: tuple[tuple[str, float], ...] = ()
    """The library call the self time was in, ``owner|qualname`` (``torch:nn|
    Module._wrapped_call_impl``, ``stdlib:copy|deepcopy``); ``""`` the line's own Python or the
    operators it called directly; ``"?"`` unknown."""

    @property
    def file(self) -> str:
        return self.site.rpartition(":")[0]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LineRow:
        return cls(
            site=str(d.get("site") or ""),
            function=str(d.get("function") or ""),
            code=str(d.get("code") or ""),
            self_ms=_f(d.get("self_ms")),
            inclusive_ms=_f(d.get("inclusive_ms")),
            self_share=as_number(d.get("self_share")),
            under=_ms(d.get("under")),
            ops=_pairs(d.get("ops")),
            calls=_pairs(d.get("calls")),
        )


@dataclass(frozen=True)
class LineTable:
    """The sampled line table of the measured steps (empty when the run was not sampled)."""

    samples: int = 0
    interval_s: float = 0.0
    steps: int = 0
    ms_per_step: float = 0.0
    categories: dict[str, float] = field(default_factory=dict)
    """ms per step of all sampled time by category."""
    rows: tuple[LineRow, ...] = ()
    python_by_owner: dict[str, float] | None = None
    """ms per step of Python time by the owner of the innermost frame (``torch:nn``,
    ``stdlib:json``, ``user``...); None when not recorded."""
    gc_ms_per_step: float = 0.0
    """Time in garbage collections of the training thread (timed exactly, not sampled)."""
    gc_collections: dict[str, int] = field(default_factory=dict)
    """Collections per generation (``"0"``, ``"1"``, ``"2"``) while sampling."""
    modes_on_share: dict[str, float] = field(default_factory=dict)
    """Share of the samples with each global mode probe on (``anomaly_detection``...)."""
    unavailable: str | None = None
    """Why the steps were not sampled (or the sampler's error), when they were not."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LineTable:
        rows, owners = d.get("rows"), d.get("python_by_owner")
        return cls(
            samples=int(_f(d.get("samples"))),
            interval_s=_f(d.get("interval_s")),
            steps=int(_f(d.get("steps"))),
            ms_per_step=_f(d.get("ms_per_step")),
            categories=_ms(d.get("categories")),
            rows=tuple(
                LineRow.from_dict(r)
                for r in (rows if isinstance(rows, list) else [])
                if isinstance(r, dict) and r.get("site")
            ),
            python_by_owner=_ms(owners) if isinstance(owners, dict) else None,
            gc_ms_per_step=_f(d.get("gc_ms_per_step")),
            gc_collections={str(k): int(v) for k, v in _ms(d.get("gc_collections")).items()},
            modes_on_share=_ms(d.get("modes_on_share")),
            unavailable=str(why) if (why := d.get("unavailable") or d.get("error")) else None,
        )

    def row(self, site: str) -> LineRow | None:
        """The row of ``site`` (None when it is not in the table)."""
        return next((r for r in self.rows if r.site == site), None)

    def inclusive_ms(self, site: str) -> float:
        """Inclusive ms per step of a user line (0 when it is not in the table)."""
        row = self.row(site)
        return row.inclusive_ms if row else 0.0

    def samples_in(self, ms_per_step: float) -> float:
        """How many samples ``ms_per_step`` of time stands for (how much evidence it has)."""
        return ms_per_step * self.steps / (self.interval_s * 1e3) if self.interval_s else 0.0
