"""What ``fix`` works on: a finding as fix reads it, a codemod's target, its result, a change.

Findings are read from ``report.json`` / ``run.json`` as plain dicts (``FindingRef``), not as
``rules.finding.Finding``: a run folder written by a newer ``check`` may carry ids this version
has not registered, and fix still reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from torchdoctor import ab
from torchdoctor.record.values import as_float
from torchdoctor.tune.fidelity import Fidelity

Status = Literal["patched", "switch", "refused", "already", "no-gain", "rejected", "failed"]
"""What became of a change.

patched: in the patch (proven with ``--prove``, else proposed); switch: the script's own
setting makes the change, set on its command line (no edit; proven with ``--prove``); refused: the code cannot be
rewritten safely (the reason says why); already: the code already does it; no-gain: measured,
but its interval does not clear ``--min-gain``; rejected: the losses left the tolerance;
failed: the patched script did not run.
"""

STATUS_WORDS: dict[str, str] = {
    "patched": "patched",
    "switch": "use the switch",
    "refused": "refused",
    "already": "already done",
    "no-gain": "no measured gain",
    "rejected": "rejected (losses)",
    "failed": "failed to run",
}

Precision = Literal["fp32", "tf32", "bf16-mixed"]
"""The arithmetic a change runs in: picks ``tune``'s loss tolerance for the fidelity gate."""


@dataclass(frozen=True)
class FindingRef:
    """One finding, read from a report's plain data."""

    id: str
    title: str = ""
    severity: str = "info"
    saving_ms_per_step: float = 0.0
    share_of_step: float = 0.0
    evidence: dict[str, Any] = field(default_factory=dict)
    where: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FindingRef:
        """Read a ``Finding.to_dict()`` document; missing keys read as their defaults."""
        evidence = d.get("evidence")
        where = d.get("where")
        return cls(
            id=str(d.get("id") or ""),
            title=str(d.get("title") or ""),
            severity=str(d.get("severity") or "info"),
            saving_ms_per_step=as_float(d.get("saving_ms_per_step")),
            share_of_step=as_float(d.get("share_of_step")),
            evidence=evidence if isinstance(evidence, dict) else {},
            where=tuple(str(w) for w in where) if isinstance(where, list) else (),
        )

    @property
    def step_ms(self) -> float | None:
        """The mean step the saving was estimated against (ms), when the evidence has it."""
        v = self.evidence.get("mean_step_ms")
        return float(v) if isinstance(v, int | float) and v > 0 else None

    @property
    def predicted_speedup(self) -> float | None:
        """step / (step - saving): the speed-up the finding's saving predicts."""
        step = self.step_ms
        if step is None or self.saving_ms_per_step <= 0:
            return None
        return step / max(step - min(self.saving_ms_per_step, step * 0.99), 1e-9)


@dataclass(frozen=True)
class Target:
    """Where one codemod is asked to rewrite, and with what (from the finding's evidence)."""

    codemod: str
    file: str
    """Absolute path of a user file."""
    line: int
    """1-based line in the original file the edit is anchored at."""
    params: dict[str, Any] = field(default_factory=dict)
    """What the codemod needs beyond the place: the arguments to set, the dimension, N..."""


@dataclass(frozen=True)
class Switch:
    """The script's own setting that makes a change, set on its command line: no edit.

    nanoGPT reads ``--compile=True`` into its ``compile`` global and compiles the model under
    ``if compile:``; naming that switch is the fix its user would make, where a patch would
    compile the model a second way beside the script's own."""

    setting: str
    """The setting's name in the script (``compile``, ``args.workers``)."""
    file: str
    """Absolute path of the file whose code reads the setting (its default is written there)."""
    line: int
    """Line of the setting's default (the global, the ``add_argument`` call)."""
    add: tuple[str, ...]
    """The command-line words that set it (``--compile=True``; ``--workers``, ``4``)."""
    args: tuple[str, ...]
    """The run's own arguments with the switch set (words of the same setting replaced)."""
    how: str
    """How the script reads it, for the summary (``configurator.py's --key=value``)."""

    @property
    def summary(self) -> str:
        return f"run with `{' '.join(self.add)}` (the script's own `{self.setting}` setting, {self.how})"


@dataclass(frozen=True)
class Rewrite:
    """A codemod's edit: the whole new source of the file."""

    source: str
    summary: str
    """One line: what changed (``num_workers=0 -> 2, persistent_workers=True``)."""


@dataclass(frozen=True)
class Refusal:
    """Why a codemod writes nothing for a finding (or, with ``already``, needs not)."""

    reason: str
    file: str | None = None
    line: int | None = None
    already: bool = False


@dataclass(frozen=True)
class Measured:
    """An interleaved measurement of one arm against the original."""

    comparison: ab.Comparison
    """Original step time / patched step time per round: its interval and the decision against
    ``1 + min_gain``."""
    rounds: int
    original_ms: float
    """Median over rounds of the original's mean measured step (ms)."""
    patched_ms: float
    warmup_extra_s: float = 0.0
    """Median over rounds of the patched warm-up minus the original's (s): a one-time cost such
    as compilation, which the steady-state ratio leaves out."""

    @property
    def ratio(self) -> float:
        """The typical per-round ratio (Hodges-Lehmann estimate)."""
        return self.comparison.interval.ratio

    @property
    def low(self) -> float:
        return self.comparison.interval.low

    @property
    def high(self) -> float:
        return self.comparison.interval.high

    def format(self) -> str:
        """``1.84x [1.71-1.95]`` (``[?]`` with too few rounds for an interval)."""
        return self.comparison.interval.format()


@dataclass(frozen=True)
class Change:
    """One codemod applied for one finding at one place, and what became of it."""

    id: str
    """``c1``, ``c2``... in the order of the findings (largest saving first)."""
    codemod: str
    finding: FindingRef
    status: Status
    reason: str = ""
    """Why refused / already / no gain / rejected / failed ('' when patched)."""
    file: str | None = None
    line: int | None = None
    summary: str = ""
    precision: Precision = "fp32"
    target: Target | None = None
    diff: str = ""
    """This change alone, as a unified diff against the original."""
    also: tuple[str, ...] = ()
    """Other findings whose remedy is this same edit."""
    measured: Measured | None = None
    fidelity: Fidelity | None = None
    switch: Switch | None = None
    """The command-line setting that makes this change instead of an edit (status ``switch``)."""
