"""The run record, typed: what ``torchdoctor check`` recorded in ``run.json``, as the run rules,
``compare`` and ``fix`` read it.

``RunRecord.from_dict`` reads the ``run.json`` document (plain data written by the capture side)
into small frozen dataclasses, so a rule asks for ``run.steps.mean_step_ms`` instead of digging in
nested dicts, and a missing section reads as its empty default. Every object keeps the ``raw`` dict
it came from: evidence shows what was recorded, including keys a newer capture adds before a
field exists for them. To read a new recorded value, add a field here with a default
(``record/typed.py`` reads it by its annotation); in a row a watcher builds, put it where the
record has it: ``typed.recorded`` writes the fields in declaration order. The fix builders in
``rules/fixes.py`` take these objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any

from torchdoctor.record.account import Experiment, Forwards, Modes, Repeat, Roofline
from torchdoctor.record.lines import LineTable
from torchdoctor.record.rows import (
    AutocastUse,
    Checkpointing,
    CompileCall,
    ConstructionCall,
    DataParallelWrapper,
    DdpWrapper,
    ForwardCalls,
    GradScaler,
    GraphBreak,
    HostSync,
    HousekeepingCall,
    Optimizer,
    RecompileEvent,
    RecompileLimitHit,
    SyncDebugSite,
    UnpinnedCopy,
)
from torchdoctor.record.typed import Row, key, omitted_at_default, read, reads
from torchdoctor.record.values import as_count, as_dict, as_int, as_list
from torchdoctor.record.write import RankPlace

_d, _count = as_dict, as_count


def _window(value: Any, _: Any) -> tuple[int, int] | None:
    got = as_list(value)
    return (_count(got[0]), _count(got[1])) if len(got) == 2 else None


@dataclass(frozen=True)
class StepStats:
    """The run's steps (milliseconds): every step's wall time and data wait, which of them were
    measured, and their statistics. One type both ways: the capture side builds it with
    ``measure`` (the statistics computed once, here) and writes ``to_dict`` into ``run.json``;
    readers get it back with ``from_dict``."""

    count: int = 0
    measured_steps: int = 0
    mean_step_ms: float | None = None
    """Mean of the measured steps; None when no step was measured."""
    mean_data_wait_ms: float = 0.0
    """Mean data wait of the measured steps (0 when none was measured)."""
    step_ms: tuple[float, ...] = ()
    source: str | None = None
    """What marked the steps (``optimizer``, ``dataloader``, ``marker``...); None if unknown."""
    warmup_steps: int = 0
    """The first steps, not measured (compilation, allocator and cache warm-up)."""
    experiment_steps: int = 0
    """Steps check added at the end, after the script's own, to measure a mode's cost (run
    with the mode switched): not the script's steps."""
    median_step_ms: float | None = None
    """Median of the measured steps; None when no step was measured."""
    profiled_steps: int = 0
    clock_errors: tuple[Any, ...] = ()
    """Why step timing fell short (the script ran its own profiler...)."""
    data_wait_ms: tuple[float, ...] = ()
    """Every step's wait for its batch."""
    window: tuple[int, int] | None = field(default=None, metadata=reads(_window))
    """The profiled window's first and last step (1-based), None when none opened."""
    signal_switches: tuple[Any, ...] = ()
    own_steps: tuple[int, ...] = ()
    other_thread_steps: int = 0
    """Step signals that came from a thread other than the script's main one (not counted)."""
    schedule: dict[str, Any] | None = field(
        default=None, metadata=reads(lambda v, _: _d(v) or None)
    )
    """Which steps were warm-up, clean, profiled and after (``Schedule.to_dict()``)."""
    timed: dict[str, Any] = field(default_factory=dict)
    """The windows timed by their boundaries alone: ``clean``, ``after`` and, on a GPU, the
    kernel window (``kernels``, with its GPU activity summary)."""

    @classmethod
    def measure(
        cls,
        source: str | None,
        step_ms: Sequence[float],
        data_wait_ms: Sequence[float],
        warmup_steps: int,
        window: Sequence[int] | None = None,
        profiled_steps: int = 0,
        measured_end: int | None = None,
        signal_switches: Sequence[Any] = (),
        experiment_steps: int = 0,
        own_steps: Sequence[int] = (),
        clock_errors: Sequence[Any] = (),
        other_thread_steps: int = 0,
        schedule: Mapping[str, Any] | None = None,
        timed: Mapping[str, Any] | None = None,
    ) -> StepStats:
        """The steps as the capture side saw them, with their statistics: the steps after the
        warm-up up to ``measured_end`` (steps from there on are check's own mode measurements,
        None: all) are the measured ones; the median and the means are over them."""
        times, waits = tuple(step_ms), tuple(data_wait_ms)
        measured = times[warmup_steps:measured_end]
        measured_wait = waits[warmup_steps:measured_end]
        n = len(measured)
        first_last = (int(window[0]), int(window[1])) if window else None
        return cls(
            count=len(times),
            measured_steps=n,
            mean_step_ms=sum(measured) / n if n else None,
            mean_data_wait_ms=sum(measured_wait) / n if n else 0.0,
            step_ms=times,
            source=source,
            warmup_steps=min(warmup_steps, len(times)),
            experiment_steps=experiment_steps,
            median_step_ms=median(measured) if measured else None,
            profiled_steps=profiled_steps,
            clock_errors=tuple(clock_errors),
            data_wait_ms=waits,
            window=first_last,
            signal_switches=tuple(signal_switches),
            own_steps=tuple(own_steps),
            other_thread_steps=other_thread_steps,
            schedule=dict(schedule) if schedule else None,
            timed=dict(timed or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``steps`` section of ``run.json``."""
        return {
            "source": self.source,
            "count": self.count,
            "warmup_steps": self.warmup_steps,
            "window": list(self.window) if self.window else None,
            "profiled_steps": self.profiled_steps,
            "step_ms": list(self.step_ms),
            "data_wait_ms": list(self.data_wait_ms),
            "measured_steps": self.measured_steps,
            "median_step_ms": self.median_step_ms,
            "mean_step_ms": self.mean_step_ms,
            "mean_data_wait_ms": self.mean_data_wait_ms if self.measured_steps else None,
            "signal_switches": list(self.signal_switches),
            "experiment_steps": self.experiment_steps,
            "own_steps": list(self.own_steps),
            "clock_errors": list(self.clock_errors),
            "other_thread_steps": self.other_thread_steps,
            "schedule": dict(self.schedule) if self.schedule else None,
            "clean": self.timed.get("clean"),
            "after": self.timed.get("after"),
            "kernels": self.timed.get("kernels"),
        }

    @property
    def window_steps(self) -> int:
        """Steps inside the profiled window (where CUDA's sync-debug mode counts); 0 if none."""
        return self.window[1] - self.window[0] + 1 if self.window else 0

    @property
    def scheduled_warmup(self) -> int | None:
        """Warm-up steps of the recorded schedule; None for a record without a schedule."""
        return _count(self.schedule.get("warmup")) if self.schedule else None

    @property
    def clean_steps(self) -> int:
        """Steps timed before the profiled window without the profiler (the ``clean`` window)."""
        return _count(_d(self.timed.get("clean")).get("steps"))

    @property
    def after_steps(self) -> int:
        """Steps timed after the profiled window (the ``after`` window)."""
        return _count(_d(self.timed.get("after")).get("steps"))

    @property
    def measured_mean_data_wait_ms(self) -> float | None:
        """Mean data wait of the measured steps (ms); None when no step was measured."""
        return self.mean_data_wait_ms if self.measured_steps else None

    @property
    def script_step_ms(self) -> tuple[float, ...]:
        """Every step of the script's own (warm-up included), without check's experiment steps."""
        extra = self.experiment_steps
        return (
            self.step_ms[: len(self.step_ms) - extra]
            if 0 < extra <= len(self.step_ms)
            else self.step_ms
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepStats:
        """The ``steps`` section read back (the mean of every step where none was recorded);
        the timed windows are its ``clean``, ``after`` and ``kernels`` keys."""
        got = read(cls, d)
        mean = got.mean_step_ms
        if mean is None and got.step_ms:
            mean = sum(got.step_ms) / len(got.step_ms)
        timed = {k: d[k] for k in ("clean", "after", "kernels") if d.get(k) is not None}
        return replace(got, mean_step_ms=mean or None, timed=timed)


@dataclass(frozen=True)
class CompileStats(Row):
    """torch.compile activity: compiles, recompiles (with guard reasons) and graph breaks."""

    compiles: int = 0
    compile_s: float = 0.0
    recompiles: int = 0
    recompile_s: float = 0.0
    recompiles_in_window: int = 0
    recompile_s_in_window: float = 0.0
    recompile_events: tuple[RecompileEvent, ...] = ()
    """The first 50 recompiles."""
    compile_calls: tuple[CompileCall, ...] = ()
    """Settings of each ``torch.compile`` call (``mode``, ``backend``, ``dynamic``...)."""
    graph_breaks: tuple[GraphBreak, ...] = ()
    """One per break location and reason."""
    recompile_limit_hits: tuple[RecompileLimitHit, ...] = ()
    ours: dict[str, Any] = field(default_factory=dict, metadata=omitted_at_default())
    """What compiled during check's own measurements after the window (``compiles``,
    ``compile_s``): check's, not the script's; recorded only when check ran such steps."""
    traced_with_wrappers_off: int = 0
    """Frames dynamo traced with torchdoctor's tensor-method wrappers taken off
    (``capture/dynamo_aside.py``)."""
    raw: dict[str, Any] = field(default_factory=dict)
    """The section as recorded (``to_dict`` writes it back, with the typed values)."""

    @property
    def compiled(self) -> bool:
        """The script compiled something (a torch.compile call, or dynamo compiled a frame)."""
        return bool(self.compile_calls) or self.compiles > 0


@dataclass(frozen=True)
class LoaderConfig(Row):
    """One DataLoader's settings as the script built it (``capture/hooks.py`` builds the row,
    its fields in the record's order)."""

    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    batch_size: int | None = None
    drop_last: bool = False
    dataset: str = ""
    """The dataset's class name."""
    dataset_len: int | None = field(default=None, metadata=reads(lambda v, _: _count(v) or None))
    """``len()`` of the loader's dataset; None when it has none (an iterable dataset)."""
    multiprocessing_context: str | None = None
    """The workers' start method when the script set one (``spawn``...), else None."""
    cpu_count: int | None = None
    cpus_per_rank: int | None = None
    explicit: dict[str, str] | None = field(default=None, metadata=omitted_at_default())
    """The arguments the construction passed, each as a short label (a function's name, a
    literal); None when the construction was not seen (a loader built before the hooks)."""
    built_in: str = field(default="", metadata=omitted_at_default())
    """``file:line`` of the library frame that built the loader (Lightning and accelerate
    rebuild the user's); empty when the user's code did."""
    call: ConstructionCall | None = field(default=None, metadata=omitted_at_default())
    """The user's ``DataLoader(...)`` call (for a rebuilt loader, the one over its dataset)."""
    error: str = field(default="", metadata=omitted_at_default())
    """Why the loader's settings or construction could not be read."""
    torch_warnings: tuple[str, ...] = field(default=(), metadata=omitted_at_default())
    """torch's own warnings about this loader (too many workers for the CPUs...)."""
    usage: dict[str, Any] = field(default_factory=dict, metadata=omitted_at_default())
    """What the loader did in the run: batches, waits and worker CPU time, in the measured
    steps (``measured_*``) and the profiled window (``window_*``)."""
    raw: dict[str, Any] = field(default_factory=dict)
    """Everything recorded about the loader (more arguments than the fields above)."""

    @property
    def cpus(self) -> int:
        """CPUs this rank's workers may use (2 when not recorded)."""
        return int(self.cpus_per_rank or self.cpu_count or 2)


@dataclass(frozen=True)
class RunConfig(Row):
    """Settings the run used: precision, parallel wrappers, optimizers, backend flags, loaders,
    the step signals' counts. Built once at the end (``capture/session.py``) from the watchers'
    parts, its fields in the record's order."""

    autocast: tuple[AutocastUse, ...] = ()
    grad_scalers: tuple[GradScaler, ...] = ()
    data_parallel: list[DataParallelWrapper] | None = None
    """nn.DataParallel constructions; None when the run did not watch for them."""
    ddp: list[DdpWrapper] = field(default_factory=list)
    """DistributedDataParallel constructions."""
    optimizers: tuple[Optimizer, ...] = ()
    backend_flags: dict[str, Any] = field(default_factory=dict)
    dataloaders: list[LoaderConfig] = field(default_factory=list)
    batches: int = 0
    """DataLoader batches the script took, in the whole run."""
    optimizer_steps: int = 0
    backward_calls: int = 0
    measured_backward_calls: int = 0
    """backward() calls in the measured steps (more than the optimizer steps: accumulation)."""
    measured_optimizer_steps: int = 0
    forward_steps: ForwardCalls = field(default_factory=ForwardCalls)
    """The top-level model calls that marked an inference loop's steps."""
    checkpointing: Checkpointing = field(default_factory=Checkpointing)
    """``torch.utils.checkpoint`` calls and the checkpointed forward's host seconds."""
    housekeeping: tuple[HousekeepingCall, ...] = ()
    """Timed housekeeping calls (``gc.collect``, ``copy.deepcopy``, ``empty_cache``...), one row
    per call site."""
    raw: dict[str, Any] = field(default_factory=dict)
    """The section as recorded (``to_dict`` writes it back, with the typed values)."""

    @property
    def micro_batches_per_step(self) -> float:
        """backward() calls per optimizer step in the measured steps (1 without accumulation)."""
        steps = self.measured_optimizer_steps
        return self.measured_backward_calls / steps if steps else 1.0

    @property
    def autocast_dtypes(self) -> set[str]:
        """dtypes of the autocast regions that were enabled."""
        return {e.dtype for e in self.autocast if e.enabled}


@dataclass(frozen=True)
class SyncStats(Row):
    """Host syncs (per call site), non_blocking copies from unpinned memory, sync-debug sites."""

    host_syncs: tuple[HostSync, ...] = ()
    unpinned_non_blocking: tuple[UnpinnedCopy, ...] = ()
    sync_debug: tuple[SyncDebugSite, ...] = ()
    sync_debug_steps: int = 0
    """Steps sync-debug mode watched (0: it watched the profiled window, older records)."""
    raw: dict[str, Any] = field(default_factory=dict)
    """The section as recorded (``to_dict`` writes it back, with the typed values)."""


@dataclass(frozen=True)
class GpuInfo(Row):
    """The GPU (name, tensor-core support) and its memory statistics; the capture side builds
    it (``capture/session.py``), its fields in the record's order, each written when taken."""

    gpm: dict[str, Any] | None = field(default=None, metadata=omitted_at_default())
    """GPU performance-monitor samples of the window (``capture/gpm.py``), when taken."""
    nvml: dict[str, Any] | None = field(default=None, metadata=omitted_at_default())
    """NVML's samples of the profiled window (``gpu_probe.nvml_sampler``), when taken."""
    memory: dict[str, Any] = field(default_factory=dict, metadata=omitted_at_default())
    device: dict[str, Any] = field(default_factory=dict, metadata=omitted_at_default())
    raw: dict[str, Any] = field(default_factory=dict)
    """The section as recorded (``to_dict`` writes it back, with the typed values)."""

    @property
    def bf16_tensor_cores(self) -> bool:
        return bool(self.device.get("bf16_tensor_cores"))

    @property
    def tf32_capable(self) -> bool:
        """TF32 matmuls run on tensor cores (recorded; else what bf16 support implies)."""
        return bool(self.device.get("tf32_capable", self.bf16_tensor_cores))

    @property
    def name(self) -> str | None:
        got = self.device.get("name")
        return None if got is None else str(got)


@dataclass(frozen=True)
class OpSummary(Row):
    """The profiled window's operators (``ops``, from the trace): how many, how small, and how
    much of their time dense math holds. None for a value the summary did not record."""

    top_level_ops_per_step: float | None = None
    median_op_us: float | None = None
    op_time_ms_per_step: float | None = None
    tiny_op_time_ms_per_step: float | None = None
    tiny_op_threshold_us: float | None = None
    cpu_op_time_ms_per_step: float | None = None
    """Top-level operator time of operators that computed on the CPU (no CUDA runtime call
    inside: no launch, copy or wait); what the intra-op threads can speed up."""
    gemm_share: float | None = None
    """GEMM (and convolution) time over operator time, on ``gemm_share_basis``."""
    gemm_share_basis: str | None = None
    """``cpu`` (operator time on the CPU) or ``device`` (kernel time)."""
    compute_share: float | None = None
    compute_ms_per_step: float | None = None
    collective_time_ms_per_step: float | None = None


@dataclass(frozen=True)
class RunOptions(Row):
    """The ``check`` options the run used, as far as readers of the record need them."""

    warmup_steps: int = 0
    profile_steps: int = 0
    """Steps asked to be measured after the warm-up (``--steps``)."""
    clean_steps: int = 0
    """Steps timed before the profiled window, without the profiler (``--clean-steps``)."""
    profile_memory: bool = False
    """The profiler recorded allocations (``--profile-memory``)."""
    full: bool = False
    """The script ran to its end after the window (``--full``)."""
    raw: dict[str, Any] = field(default_factory=dict)
    """The section as recorded (``to_dict`` writes it back, with the typed values)."""


@dataclass(frozen=True)
class MonitorRecord(Row):
    """The stack watcher's record (``capture/monitor.py``): the user stacks it sampled in the
    steps that ran long, and every step's wait for a core."""

    interval_s: float = 0.0
    """How often it woke (s)."""
    source: str | None = None
    """What marked the steps it watched; its steps are not the record's if that changed."""
    long_step_samples: dict[str, Any] = field(default_factory=dict)
    """1-based step -> ``[{"stack": [user lines, innermost first], "samples": n, "chain": key}]``,
    the five stacks seen most often, most frequent first; ``chain``: the key of the sample's
    whole user call chain (``capture.monitor.chain_key``; absent in an older record)."""
    step_core_wait_ms: list[Any] | None = field(default=None, metadata=omitted_at_default())
    """Every step's wait for a core (ms, None where unknown), as ``steps.step_ms``; None when
    not recorded (an older record)."""
    step_run_ms: list[Any] | None = field(default=None, metadata=omitted_at_default())
    """Every step's CPU time run (ms, None where unknown), its thread's and its intra-op
    helpers' (``clock.run_s``: the work a step did, and their spinning), as ``steps.step_ms``;
    None when not recorded (an older record)."""
    no_step_notice: bool = False
    """It said on standard error that no step had ended for a while."""
    ordinary_chains: dict[str, int] = field(default_factory=dict, metadata=omitted_at_default())
    """Chain key -> samples, of the steps that did not run long (up to two samples a step): the
    lines the loop runs every step; empty in an older record."""
    ordinary_steps: int = field(default=0, metadata=omitted_at_default())
    """Steps whose samples are in ``ordinary_chains``."""
    long_step_core_wait: dict[str, Any] | None = field(default=None, metadata=omitted_at_default())
    """An older record's reading: step -> ``{"watched_ms", "core_wait_ms"}`` of the long steps
    it sampled."""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunRecord(Row):
    """One rank's ``run.json``, typed for the run rules (read by ``record/typed.py``; written by
    the capture side, ``record/write.py``, not from here)."""

    schema_version: int = field(default=0, metadata=reads(lambda v, _: max(0, as_int(v) or 0)))
    """The record's ``schema_version`` (0: a record older than the field); ``record/folder.py``
    refuses one newer than this code reads (``layout.RUN_SCHEMA_VERSION``)."""
    exit_status: str | None = field(default=None, metadata=key("exit.status"))
    """``completed``, ``stopped`` (by check after the window), ``exception``, ..."""
    exit_code: int | None = field(default=None, metadata=key("exit.code"))
    """The script's exit status (None when it recorded none)."""
    exit_exception: str | None = field(default=None, metadata=key("exit.exception"))
    """The exception that ended the script, as recorded."""
    exit_phase: str | None = field(default=None, metadata=key("exit.phase"))
    """Where the script was when it failed (``compile``, ``import``, ``run``...), if recorded."""
    options: RunOptions = field(default_factory=RunOptions)
    script: str | None = None
    """The script as check was given it (rank 0's record takes the combined record's)."""
    argv: tuple[str, ...] = ()
    """The script's arguments (after its name)."""
    torch_version: str | None = None
    python_version: str | None = None
    cuda_available: bool | None = None
    """torch saw a CUDA device; None when not recorded (a record rebuilt from the steps log)."""
    rank: RankPlace = field(default_factory=RankPlace)
    steps: StepStats = field(default_factory=StepStats)
    compile: CompileStats = field(default_factory=CompileStats)
    config: RunConfig = field(default_factory=RunConfig)
    syncs: SyncStats = field(default_factory=SyncStats)
    gpu: GpuInfo | None = None
    """None on a CPU run."""
    ops: dict[str, Any] = field(default_factory=dict)
    """Operator summary of the profiled window as recorded (a finding's evidence shows it);
    ``op_summary`` is the same typed, for the rules."""
    op_summary: OpSummary = field(default_factory=OpSummary, metadata=key("ops"))
    oom: dict[str, Any] | None = field(default=None, metadata=reads(lambda v, _: _d(v) or None))
    lines: LineTable = field(default_factory=LineTable)
    """The sampled line table of the measured steps (``record/lines.py``)."""
    cpu: dict[str, Any] = field(default_factory=dict)
    """The host CPU counters as recorded (run-queue waits, other processes' busy cores...)."""
    roofline: dict[str, Any] = field(default_factory=dict)
    """Work per step, attainable rates and efficiency as recorded (``record/floors.py`` reads
    the floors from it)."""
    experiments: tuple[Experiment, ...] = ()
    """check's own measurements after the window, one per toggle (measured, skipped, failed)."""
    roof: Roofline = field(default_factory=Roofline, metadata=key("roofline"))
    """``roofline`` typed (``record/account.py``), for the account and mode rules."""
    modes: Modes = field(default_factory=Modes)
    """The global modes (anomaly detection, profiler, sync-debug...) and the lines that set them."""
    repeats: tuple[Repeat, ...] = ()
    """Construction work repeated inside the measured steps, one per user line and kind."""
    forwards: Forwards = field(default_factory=Forwards)
    """Forwards no backward reached, and modules called in a loop."""
    job: dict[str, Any] = field(default_factory=dict)
    """The job's length as the script names it (``{"name", "value", "unit"}``), when found."""
    monitor: MonitorRecord = field(default_factory=MonitorRecord)
    memory_steps: dict[str, Any] = field(default_factory=dict)
    """Memory per step, a column each (``rss_bytes``, ``cuda_allocated_bytes``...), and the
    device's ``snapshot`` of its largest holders when taken."""
    findings: list[dict[str, Any]] = field(default_factory=list)
    """The run-level findings check attached to the record (``report.json`` has the merged
    ones)."""
    trace: str | None = None
    """The trace file, relative to the run folder; None when none was written."""
    profiler_stopped_early: str | None = field(default=None, metadata=key("profiler.stopped_early"))
    """Why the profiler stopped before the window's end (its memory budget...), if it did."""
    framework: str | None = field(default=None, metadata=key("framework.name"))
    """The trainer whose callback ran check (``lightning``, ``transformers``), if one did."""
    frameworks: tuple[str, ...] = ()
    """Trainers seen on the stack around the steps (for a hint to use their callback)."""
    notes: tuple[str, ...] = ()
    """torchdoctor's own failures, caught while the script went on."""
    raw: dict[str, Any] = field(default_factory=dict)

    def recorded(self, section: str) -> Any:
        """A section as the capture side wrote it, for a document that copies it whole
        (``report.json`` repeats the line table and the roofline); None when absent. Read
        values through the typed fields."""
        return self.raw.get(section)

    @property
    def step_ms(self) -> float | None:
        """Mean step time (ms), None when no step was measured."""
        return self.steps.mean_step_ms

    @property
    def completed(self) -> bool:
        """The script ran to its own end (so whole-run totals are exact)."""
        return self.exit_status == "completed"
