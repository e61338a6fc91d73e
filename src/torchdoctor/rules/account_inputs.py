"""Typed reads of the accounting sections of a ``check`` record (``run.json``): the line
table, the roofline, the global modes, repeated construction, forwards without backward, and
the toggles measured inside the run. Plain data; no torch import."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchdoctor.record.run import RunRecord

FRAMEWORK_PYTHON = frozenset(
    {
        "torch",
        "torch:nn",
        "torch:optim",
        "torch:autograd",
        "torch:_tensor",
        "torch:functional",
        "torch:_ops",
        "torch:overrides",
        "torch:amp",
        "torch:cuda",
        "torch:distributed",
        "torch:_compile",
        "torch:_jit_internal",
        "torch:__init__",
    }
)
"""Owners (``capture/code_paths.py``'s ``detail``) of the Python that is framework overhead
between operators: module calls, optimizer loops, autograd's Python, dispatch wrappers. Torch
formatting a tensor for ``print`` (``torch:_tensor_str``), saving (``torch:serialization``) or
collating a batch (``torch:utils``) is work the user asked for, not overhead."""


def framework_python_ms(lines: dict[str, Any]) -> float:
    """ms per step of Python in the framework's own code (torch's overhead, installed packages')."""
    owners = lines.get("python_by_owner") or {}
    return sum(
        float(v) for k, v in owners.items() if k in FRAMEWORK_PYTHON or str(k).startswith("pkg:")
    )


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _rows(value: Any) -> list[dict[str, Any]]:
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


@dataclass(frozen=True)
class Account:
    """What ``check`` recorded to account for the step."""

    lines: dict[str, Any] = field(default_factory=dict)
    """The line table (``capture/line_table.py``): ``rows``, ``categories`` (ms per step)."""
    roofline: dict[str, Any] = field(default_factory=dict)
    """``work`` (FLOPs, bytes), ``attainable`` rates, ``efficiency``, or ``unavailable``."""
    modes: dict[str, Any] = field(default_factory=dict)
    repeats: list[dict[str, Any]] = field(default_factory=list)
    forwards: dict[str, Any] = field(default_factory=dict)
    experiments: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_record(cls, run: RunRecord) -> Account:
        raw = run.raw
        return cls(
            lines=_d(raw.get("lines")),
            roofline=_d(raw.get("roofline")),
            modes=_d(raw.get("modes")),
            repeats=_rows(raw.get("repeats")),
            forwards=_d(raw.get("forwards")),
            experiments=_rows(raw.get("experiments")),
        )

    def experiment(self, fid: str) -> dict[str, Any] | None:
        """The toggle measured for finding ``fid`` (with at least one step of each arm)."""
        for e in self.experiments:
            if e.get("id") == fid and e.get("ratio") is not None:
                return e
        return None

    def mode_share(self, name: str) -> float:
        """Share of the sampled time with global mode ``name`` on (0 when not sampled)."""
        return float(_d(self.lines.get("modes_on_share")).get(name) or 0.0)

    def setter_sites(self, *calls: str, value: Any = None) -> list[str]:
        """User lines that called one of the mode setters ``calls`` (with ``value`` if given)."""
        out = []
        for c in _rows(self.modes.get("setter_calls")):
            wanted = c.get("call") in calls and (value is None or c.get("value") == value)
            if wanted and c.get("site") and c["site"] not in out:
                out.append(str(c["site"]))
        return out

    def row(self, site: str) -> dict[str, Any] | None:
        """The line table's row of ``site``."""
        return next((r for r in _rows(self.lines.get("rows")) if r.get("site") == site), None)

    def inclusive_ms(self, site: str) -> float:
        """Inclusive ms per step of a user line (0 when it is not in the table)."""
        row = self.row(site)
        return float(row.get("inclusive_ms") or 0.0) if row else 0.0

    @property
    def efficiency(self) -> dict[str, Any]:
        """``share`` (roofline over step), ``roofline_ms``, ``flops_share``, ``bytes_share``."""
        return _d(self.roofline.get("efficiency"))

    @property
    def work(self) -> dict[str, Any]:
        return _d(self.roofline.get("work"))
