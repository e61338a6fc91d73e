"""The rows of the record's sections, typed: one call site each (host syncs, non_blocking copies
from pageable memory, CUDA sync-debug sites, graph breaks, recompiles, recompile-limit hits, timed
housekeeping calls), one autocast use per (device, dtype, enabled), one row per optimizer,
GradScaler, DDP or DataParallel wrapper and ``torch.compile`` call the script made, the
checkpointing counts, and the top-level model calls that marked an inference loop's steps.

The watchers (``capture/syncs.py``, ``compile_watch.py``, ``config_probe.py``,
``housekeeping.py``, ``checkpointing.py``, ``forward_steps.py``) build them, and ``record/typed.py``'s ``recorded``
writes them into ``run.json``: a field per recorded key, in the record's order. Read and
written back by ``from_dict`` and ``to_dict``: every recorded key, one a newer record adds
without a field too, stays in ``raw`` and is written back. A missing or malformed value reads
as the field's default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchdoctor.record.typed import Row, key, omitted_at_default


@dataclass(frozen=True)
class HostSync(Row):
    """A call site that made the host wait for the device (``syncs.host_syncs``)."""

    kind: str = ""
    """What synced (``.item()``, ``.cpu()``, ``.tolist()``, ``torch.cuda.synchronize``...)."""
    device: str = ""
    """The tensor's device (``cuda:0``, ``cpu``: a sync on a CPU tensor is free)."""
    site: str = ""
    """``file:line`` of the user's call."""
    calls: int = 0
    seconds: float = 0.0
    """Host time blocked in these calls."""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UnpinnedCopy(Row):
    """``.to(device, non_blocking=True)`` from pageable memory at one site
    (``syncs.unpinned_non_blocking``): a synchronous copy in fact."""

    site: str = ""
    copies: int = 0
    bytes: int = 0
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SyncDebugSite(Row):
    """A site CUDA's sync-debug mode warned about (``syncs.sync_debug``)."""

    site: str = ""
    count: int = 0
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GraphBreak(Row):
    """Where and why dynamo broke a compiled graph (``compile.graph_breaks``)."""

    site: str = ""
    reason: str = ""
    count: int = 0
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RecompileEvent(Row):
    """One recompile (``compile.recompile_events``): the guard that failed and, parsed from it,
    the tensor dimensions (``{"tensor", "kind", "dim", "expected", "actual"}``) and the Python
    values (``{"name", "value", "kind"}``) it guarded."""

    compile_id: str = ""
    """Dynamo's ``frame/attempt`` (``0/3``: the third recompile of the first frame)."""
    function: str = ""
    site: str = ""
    """``file:line`` of the recompiled function (``?:0`` when dynamo did not name it)."""
    reason: str = ""
    seconds: float = 0.0
    changed_dims: tuple[dict[str, Any], ...] = ()
    changed_values: tuple[dict[str, Any], ...] = ()
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RecompileLimitHit(Row):
    """A function that hit dynamo's recompile limit and runs eager from then on
    (``compile.recompile_limit_hits``)."""

    limit: int = 0
    function: str = ""
    site: str = ""
    last_reason: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AutocastUse(Row):
    """Autocast regions entered with one (device, dtype, enabled) (``config.autocast``)."""

    device: str = ""
    dtype: str = ""
    enabled: bool = False
    entries: int = 0
    device_type: str = field(default="", metadata=omitted_at_default())
    """The region's ``device_type`` where a record names it so instead of ``device``."""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HousekeepingCall(Row):
    """A timed housekeeping call site (``config.housekeeping``)."""

    what: str = ""
    """``gc.collect``, ``copy.deepcopy``, ``torch.cuda.empty_cache``..."""
    site: str = ""
    calls: int = 0
    seconds: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConstructionCall(Row):
    """The user's call that built an object, as source text (``capture/config_probe.py``)."""

    site: str = ""
    func: str = field(default="", metadata=omitted_at_default("kwargs"))
    """The callee as written (``torch.optim.AdamW``)."""
    args: tuple[str, ...] = field(default=(), metadata=omitted_at_default("kwargs"))
    kwargs: dict[str, str] | None = field(default=None, metadata=omitted_at_default())
    """Keyword arguments as source text; None when the call's source could not be read (then
    the record has only the site)."""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Optimizer(Row):
    """An optimizer the script built (``config.optimizers``)."""

    class_name: str = field(default="", metadata=key("class"))
    impl: str = ""
    """``fused``, ``foreach``, ``foreach (auto)``, ``for-loop`` or ``default``."""
    impl_options: tuple[str, ...] | None = None
    """The implementations its class accepts for these parameters; None: not recorded."""
    fused: bool | None = None
    """The ``fused`` argument as the optimizer holds it (None: left to torch)."""
    foreach: bool | None = None
    param_tensors: int = 0
    param_count: int = 0
    param_bytes: int = 0
    param_devices: tuple[str, ...] = ()
    param_dtypes: tuple[str, ...] = ()
    call: ConstructionCall | None = field(default=None, metadata=omitted_at_default())
    """Where the script built it; None when library code did."""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GradScaler(Row):
    """A ``GradScaler`` the script built (``config.grad_scalers``)."""

    device: str = ""
    enabled: bool = False
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DdpWrapper(Row):
    """A ``DistributedDataParallel`` the script built (``config.ddp``)."""

    bucket_cap_mb: float = 0.0
    """The gradient buckets' size (MiB)."""
    find_unused_parameters: bool = False
    static_graph: bool = False
    gradient_as_bucket_view: bool = False
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DataParallelWrapper(Row):
    """An ``nn.DataParallel`` the script built (``config.data_parallel``)."""

    device_ids: tuple[int, ...] = ()
    """The devices it replicates the module on (empty: every visible one)."""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CompileCall(Row):
    """One ``torch.compile`` call's settings (``compile.compile_calls``)."""

    target: str | None = None
    """The compiled object's class name (``OptimizedModule`` for a model...); None: no target."""
    mode: str | None = None
    backend: str = "inductor"
    """The backend's name (a callable backend's ``__name__``)."""
    dynamic: bool | None = None
    fullgraph: bool = False
    options: tuple[str, ...] = ()
    """The names of the ``options`` passed (their values are not recorded)."""
    disable: bool = False
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Checkpointing(Row):
    """``torch.utils.checkpoint`` in the run (``config.checkpointing``)."""

    calls_total: int = 0
    """Checkpointed calls in the whole run, measured steps or not."""
    calls_measured: int = 0
    """Checkpointed forward calls in the measured steps."""
    forward_s_measured: float = 0.0
    """Host seconds of those forwards (what backward runs again)."""
    use_reentrant: tuple[str, ...] = ()
    """The ``use_reentrant`` values the calls passed, as ``repr`` (``'None'``: torch's default)."""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ForwardCalls(Row):
    """The top-level model calls the forward step signal saw (``config.forward_steps``,
    ``capture/forward_steps.py``): an inference loop's steps."""

    top_level_calls: int = 0
    """Top-level module calls seen (every module's while discovering, then the model's)."""
    model: str | None = None
    """The class name of the module whose calls were the steps; None: none was called twice."""
    backward_seen: bool = False
    """A backward pass ran through a model call's output: a training loop, not counted."""
    raw: dict[str, Any] = field(default_factory=dict)
