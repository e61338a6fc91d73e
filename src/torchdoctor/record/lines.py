"""The line table of a ``check`` record (``run.json``'s ``lines``), typed: where the measured
steps' wall time went, by the user's own source line, as ``capture/line_table.py`` wrote it.

Plain data; a missing or malformed field reads as its empty default, so a record written before
a field existed still reads (a row of an older record has no ``calls``: it says nothing about
the library calls under it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from torchdoctor.record.typed import Row, read, reads
from torchdoctor.record.values import as_dict, as_rows


def _sited(value: Any, _: Any) -> tuple[LineRow, ...]:
    return tuple(LineRow.from_dict(r) for r in as_rows(value) if r.get("site"))


@dataclass(frozen=True)
class LineRow(Row):
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


@dataclass(frozen=True)
class LineTable(Row):
    """The sampled line table of the measured steps (empty when the run was not sampled)."""

    samples: int = 0
    interval_s: float = 0.0
    steps: int = 0
    ms_per_step: float = 0.0
    categories: dict[str, float] = field(default_factory=dict)
    """ms per step of all sampled time by category."""
    rows: tuple[LineRow, ...] = field(default=(), metadata=reads(_sited))
    """The rows that name their ``site``."""
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
    """Why the steps were not sampled (or the sampler's ``error``), when they were not."""

    @classmethod
    def from_dict(cls, d: Any) -> LineTable:
        table = read(cls, d)
        why = table.unavailable or as_dict(d).get("error")
        return replace(table, unavailable=str(why) if why else None)

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
