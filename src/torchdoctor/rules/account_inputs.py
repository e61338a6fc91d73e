"""The accounting sections of a ``check`` record (``run.json``) in one object for the account
and mode rules: the line table, the roofline, the global modes, repeated construction, forwards
without backward, and the toggles measured inside the run, each typed in ``record/``; and which
of torch's Python is framework overhead. Plain data; no torch import."""

from __future__ import annotations

from dataclasses import dataclass, field

from torchdoctor.record.account import Experiment, Forwards, Modes, Repeat, Roofline
from torchdoctor.record.lines import LineTable
from torchdoctor.record.run import RunRecord

USER_WORK_IN_TORCH = frozenset(
    {
        "torch:_tensor_str",
        "torch:serialization",
        "torch:utils",
        "torch:storage",
        "torch:hub",
        "torch:onnx",
        "torch:export",
        "torch:testing",
    }
)
"""Owners (``code_paths.py``'s ``detail``) of torch's Python that is work the user asked
for, not overhead between operators: formatting a tensor for ``print`` (``torch:_tensor_str``),
saving (``torch:serialization``), collating a batch (``torch:utils``). The rest of torch's
Python is framework overhead: module calls, optimizer loops, autograd's Python, dispatch
wrappers, compiled code's guards and runtime wrappers (``torch:_dynamo``, ``torch:_functorch``,
``torch:_inductor``), FX graphs (``torch``)."""


def is_framework_python(owner: str) -> bool:
    """Whether Python time in ``owner``'s code is framework overhead (torch's, a package's)."""
    if owner.startswith("pkg:"):
        return True
    return (owner == "torch" or owner.startswith("torch:")) and owner not in USER_WORK_IN_TORCH


def python_ms_of_framework(table: LineTable) -> float:
    """ms per step of Python in the framework's own code (torch's overhead, installed packages')."""
    return sum(v for k, v in (table.python_by_owner or {}).items() if is_framework_python(k))


def repeat_sites(run: RunRecord, kind: str | None = None) -> set[str]:
    """The user lines where ``check`` saw a construction repeated (of ``kind``, if given)."""
    return {r.site for r in run.repeats if r.site and (kind is None or r.kind == kind)}


@dataclass(frozen=True)
class Account:
    """What ``check`` recorded to account for the step, typed (``record/lines.py``,
    ``record/account.py``)."""

    lines: LineTable = field(default_factory=LineTable)
    """The line table (``capture/line_table.py``): rows, category totals (ms per step)."""
    roofline: Roofline = field(default_factory=Roofline)
    """The counted work at the attainable rates, the efficiency, or why there is none."""
    modes: Modes = field(default_factory=Modes)
    repeats: tuple[Repeat, ...] = ()
    forwards: Forwards = field(default_factory=Forwards)
    experiments: tuple[Experiment, ...] = ()

    @classmethod
    def from_record(cls, run: RunRecord) -> Account:
        return cls(
            lines=run.lines,
            roofline=run.roof,
            modes=run.modes,
            repeats=run.repeats,
            forwards=run.forwards,
            experiments=run.experiments,
        )

    def experiment(self, fid: str) -> Experiment | None:
        """The toggle measured for finding ``fid`` (with at least one step of each arm)."""
        return next((e for e in self.experiments if e.id == fid and e.ratio is not None), None)

    def mode_share(self, name: str) -> float:
        """Share of the sampled time with global mode ``name`` on (0 when not sampled)."""
        return self.lines.modes_on_share.get(name) or 0.0

    def setter_sites(self, *calls: str, value: object = None) -> list[str]:
        """User lines that called one of the mode setters ``calls`` (with ``value`` if given)."""
        out: list[str] = []
        for c in self.modes.setter_calls:
            wanted = c.call in calls and (value is None or c.value == value)
            if wanted and c.site not in out:
                out.append(c.site)
        return out
