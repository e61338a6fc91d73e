"""The accounting sections of a ``check`` record (``run.json``), typed: the roofline, the global
modes, repeated construction, forwards that record graphs for nothing or run in loops, and the
toggles measured inside the run. The line table is ``record/lines.py``.

Each object keeps the ``raw`` dict it was read from, which is what a finding's evidence shows;
a rule reads the typed fields. A missing or malformed section reads as its empty default.
Plain data; no torch import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchdoctor.record.typed import Coerce, Row, key, null_at_default, reads
from torchdoctor.record.values import as_dict, as_rows

_d, _rows = as_dict, as_rows


@dataclass(frozen=True)
class DtypeWork(Row):
    """Counted work of one dtype class per step."""

    flops: float = 0.0
    bytes: float = 0.0


@dataclass(frozen=True)
class Roofline(Row):
    """The step's counted work (FLOPs, bytes) at the attainable rates (``roofline``)."""

    by_dtype: dict[str, DtypeWork] = field(default_factory=dict, metadata=key("work.by_dtype"))
    attainable_source: str | None = field(default=None, metadata=key("attainable.source"))
    """Where the attainable rates come from (measured on this CPU, a GPU's datasheet)."""
    unavailable: str | None = None
    """Why there is no roofline (compiled code, an unknown GPU), when there is none."""
    roofline_ms: float | None = field(default=None, metadata=key("efficiency.roofline_ms"))
    share: float | None = field(default=None, metadata=key("efficiency.share"))
    """``roofline_ms`` over the step: the efficiency."""
    flops_share: float | None = field(default=None, metadata=key("efficiency.flops_share"))
    bytes_share: float | None = field(default=None, metadata=key("efficiency.bytes_share"))
    work: dict[str, Any] = field(default_factory=dict)
    """The counted work as recorded (``by_dtype``, ``by_op``...)."""
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def by_dtype_raw(self) -> dict[str, Any]:
        """``work.by_dtype`` as recorded (for evidence)."""
        return _d(self.work.get("by_dtype"))


@dataclass(frozen=True)
class SetterCall(Row):
    """A user line that called a global mode's setter (``set_detect_anomaly(True)``...)."""

    call: str
    value: object = None
    site: str = field(default="", metadata=null_at_default())
    """The user's line; empty (recorded as null) when no user frame made the call."""


def _sited(cls: type[Row]) -> Coerce:
    """Read rows of ``cls``, leaving out those that name no ``site``."""
    return lambda value, _: tuple(cls.from_dict(r) for r in _rows(value) if r.get("site"))


@dataclass(frozen=True)
class Modes(Row):
    """Global modes and thread settings seen during the measured steps (``modes``); the
    capture side builds it (``capture/modes.py``), its fields in the record's order. A value
    torch would not tell is None."""

    anomaly_detection: bool = False
    anomaly_check_nan: bool | None = None
    deterministic_algorithms: bool = False
    deterministic_warn_only: bool | None = None
    intra_op_threads: int | None = None
    interop_threads: int | None = None
    cores_per_rank: int | None = None
    thread_env: dict[str, Any] = field(default_factory=dict)
    """The thread variables of the environment (``OMP_NUM_THREADS``...), as recorded."""
    mkldnn_enabled: bool | None = None
    mkldnn_available: bool | None = None
    cudnn_enabled: bool | None = None
    cudnn_deterministic: bool | None = None
    cudnn_benchmark: bool | None = None
    setter_calls: tuple[SetterCall, ...] = field(default=(), metadata=reads(_sited(SetterCall)))
    """The setter calls (at most 32); read back, those that name their ``site``."""

    def enabled(self, backend: str) -> bool | None:
        """``cudnn`` or ``mkldnn`` switched on (None: not recorded)."""
        return {"cudnn": self.cudnn_enabled, "mkldnn": self.mkldnn_enabled}.get(backend)


@dataclass(frozen=True)
class Repeat(Row):
    """Construction work at one user line inside the measured steps (``repeats``)."""

    kind: str
    """``optimizer``, ``module``, ``module.to``, ``copy``, ``dataloader``, ``hook``..."""
    site: str
    what: str = ""
    calls: int = 0
    seconds: float = 0.0
    hook_functions: tuple[tuple[str, str], ...] = ()
    """(file, function) of the hooks registered, for ``hook``."""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ForwardSite(Row):
    """The outermost forwards made from one user line in the watched step."""

    site: str = field(default="", metadata=null_at_default())
    """The user's line; empty (recorded as null) when no user frame made the call."""
    module: str = ""
    """The module's class name (of the first call)."""
    calls: int = 0
    graphs: int = 0
    """Calls whose output carried an autograd graph."""
    reached: int = 0
    """Of those, the ones a backward reached."""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModuleLoop(Row):
    """One module instance called many times from one user line in a step."""

    site: str
    module: str = ""
    cell: bool = False
    """An RNN cell (``nn.RNNCellBase``)."""
    calls: int = 0
    grad_calls: int = 0
    sliced: bool = False
    """Called on slices of one tensor (samples, time steps)."""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Forwards(Row):
    """What the forward watch saw (``forwards``); the capture side builds it
    (``capture/forward_watch.py``), its fields in the record's order."""

    watched_calls: int = 0
    """Outermost forwards watched (at most 256)."""
    forwards: tuple[ForwardSite, ...] = ()
    """Every user line's outermost forwards."""
    unreached: tuple[ForwardSite, ...] = field(default=(), metadata=reads(_sited(ForwardSite)))
    """The lines whose recorded graphs no backward reached; read back, those with a site."""
    any_backward: bool = False
    loops: tuple[ModuleLoop, ...] = field(default=(), metadata=reads(_sited(ModuleLoop)))


@dataclass(frozen=True)
class Experiment(Row):
    """A toggle measured inside the run: some steps with a mode changed, interleaved with
    steps without (``experiments``)."""

    id: str
    """The finding it measures (``anomaly-detection``...)."""
    toggle: str = ""
    """What was changed, in words (``2 intra-op threads instead of 1``)."""
    baseline_ms: tuple[float, ...] = ()
    """Every step without the change (ms), in the order they ran."""
    changed_ms: tuple[float, ...] = ()
    """Every step with it, each run beside the baseline step of the same index."""
    baseline_median_ms: float | None = None
    changed_median_ms: float | None = None
    ratio: float | None = None
    """Changed over baseline median step; None without a step of each arm."""
    pair_ratios: tuple[float, ...] = ()
    net_pair_ratios: tuple[float, ...] = ()
    """The pairs' ratios net of each step's wait for a core (empty: not read)."""
    rejected_pairs: tuple[str, ...] = ()
    """The step pairs left out, each with why (an irregular step)."""
    error: str | None = None
    """Why switching the toggle failed (None when it did not)."""
    skipped: str | None = None
    """Why the toggle was not measured (None when it was, or failed)."""
    raw: dict[str, Any] = field(default_factory=dict)
