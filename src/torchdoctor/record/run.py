"""The run record, typed: what ``torchdoctor check`` recorded in ``run.json``, as the run rules,
``compare`` and ``fix`` read it.

``RunRecord.from_dict`` reads the ``run.json`` document (plain data written by the capture side)
into small frozen dataclasses, so a rule asks for ``run.steps.mean_step_ms`` instead of digging in
nested dicts, and a missing section reads as its empty default. Every object keeps the ``raw`` dict
it came from: evidence shows what was recorded, including keys a newer capture adds before a
field exists for them. To read a new recorded value, add a field here (with a default) and read
it in ``from_dict``; the fix builders in ``rules/fixes.py`` take these objects.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from torchdoctor.record.account import Experiment, Forwards, Modes, Repeat, Roofline
from torchdoctor.record.lines import LineTable
from torchdoctor.record.values import (
    as_dict,
    as_flag,
    as_float,
    as_int,
    as_list,
    as_number,
    as_rows,
)
from torchdoctor.record.write import RankPlace

_d, _rows, _f = as_dict, as_rows, as_float


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _count(value: Any) -> int:
    """A recorded count as an int (a float truncated); 0 when it is no finite number."""
    got = as_number(value)
    return int(got) if got is not None and math.isfinite(got) else 0


def _numbers(value: Any) -> tuple[float, ...]:
    """The numbers of a recorded list, as floats (anything else left out)."""
    return tuple(float(x) for x in as_list(value) if as_number(x) is not None)


def _rank(d: dict[str, Any]) -> RankPlace:
    rank, local, world = (as_int(d.get(k)) for k in ("rank", "local_rank", "world_size"))
    return RankPlace(rank or 0, local or 0, world or 1)


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
    window: tuple[int, int] | None = None
    """The profiled window's first and last step (1-based), None when none opened."""
    signal_switches: tuple[Any, ...] = ()
    own_steps: tuple[int, ...] = ()
    other_thread_steps: int = 0
    """Step signals that came from a thread other than the script's main one (not counted)."""
    schedule: dict[str, Any] | None = None
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
        step_ms = _numbers(d.get("step_ms"))
        window: list[Any] = list(d.get("window") or ())
        sched = _d(d.get("schedule"))
        mean = d.get("mean_step_ms")
        if mean is None and step_ms:
            mean = sum(step_ms) / len(step_ms)
        return cls(
            count=_count(d.get("count")),
            measured_steps=_count(d.get("measured_steps")),
            mean_step_ms=float(mean) if mean else None,
            mean_data_wait_ms=_f(d.get("mean_data_wait_ms")),
            step_ms=step_ms,
            source=str(d["source"]) if d.get("source") else None,
            warmup_steps=_count(d.get("warmup_steps")),
            experiment_steps=_count(d.get("experiment_steps")),
            median_step_ms=as_number(d.get("median_step_ms")),
            profiled_steps=_count(d.get("profiled_steps")),
            clock_errors=tuple(as_list(d.get("clock_errors"))),
            data_wait_ms=_numbers(d.get("data_wait_ms")),
            window=(_count(window[0]), _count(window[1])) if len(window) == 2 else None,
            signal_switches=tuple(as_list(d.get("signal_switches"))),
            own_steps=tuple(int(x) for x in _numbers(d.get("own_steps"))),
            other_thread_steps=_count(d.get("other_thread_steps")),
            schedule=sched or None,
            timed={k: d[k] for k in ("clean", "after", "kernels") if d.get(k) is not None},
        )


@dataclass(frozen=True)
class CompileStats:
    """torch.compile activity: compiles, recompiles (with guard reasons) and graph breaks."""

    compiles: int = 0
    compile_s: float = 0.0
    recompiles: int = 0
    recompile_s: float = 0.0
    recompiles_in_window: int = 0
    recompile_s_in_window: float = 0.0
    recompile_events: list[dict[str, Any]] = field(default_factory=list)
    """``{"site", "function", "reason"}`` per recompile."""
    graph_breaks: list[dict[str, Any]] = field(default_factory=list)
    """``{"site", "reason", "count"}`` per break location."""
    recompile_limit_hits: list[dict[str, Any]] = field(default_factory=list)
    compile_calls: list[dict[str, Any]] = field(default_factory=list)
    """Settings of each ``torch.compile`` call (``mode``, ``backend``, ``dynamic``...)."""
    ours: dict[str, Any] = field(default_factory=dict)
    """What compiled during check's own measurements after the window (``compiles``,
    ``compile_s``): check's, not the script's."""

    @property
    def compiled(self) -> bool:
        """The script compiled something (a torch.compile call, or dynamo compiled a frame)."""
        return bool(self.compile_calls) or self.compiles > 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompileStats:
        return cls(
            compiles=_count(d.get("compiles")),
            compile_s=_f(d.get("compile_s")),
            recompiles=_count(d.get("recompiles")),
            recompile_s=_f(d.get("recompile_s")),
            recompiles_in_window=_count(d.get("recompiles_in_window")),
            recompile_s_in_window=_f(d.get("recompile_s_in_window")),
            recompile_events=_rows(d.get("recompile_events")),
            graph_breaks=_rows(d.get("graph_breaks")),
            recompile_limit_hits=_rows(d.get("recompile_limit_hits")),
            compile_calls=_rows(d.get("compile_calls")),
            ours=_d(d.get("ours")),
        )


@dataclass(frozen=True)
class LoaderConfig:
    """One DataLoader's settings as the script built it."""

    num_workers: int = 0
    pin_memory: bool = False
    batch_size: int | None = None
    cpus_per_rank: int | None = None
    cpu_count: int | None = None
    dataset_len: int | None = None
    """``len()`` of the loader's dataset; None when it has none (an iterable dataset)."""
    persistent_workers: bool = False
    multiprocessing_context: str | None = None
    """The workers' start method when the script set one (``spawn``...), else None."""
    usage: dict[str, Any] = field(default_factory=dict)
    """What the loader did in the run: batches, waits and worker CPU time, in the measured
    steps (``measured_*``) and the profiled window (``window_*``)."""
    torch_warnings: tuple[str, ...] = ()
    """torch's own warnings about this loader (too many workers for the CPUs...)."""
    raw: dict[str, Any] = field(default_factory=dict)
    """Everything recorded about the loader (more arguments than the fields above)."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoaderConfig:
        return cls(
            num_workers=_count(d.get("num_workers")),
            pin_memory=bool(d.get("pin_memory")),
            batch_size=d.get("batch_size"),
            cpus_per_rank=d.get("cpus_per_rank"),
            cpu_count=d.get("cpu_count"),
            dataset_len=_count(d.get("dataset_len")) or None,
            persistent_workers=bool(d.get("persistent_workers")),
            multiprocessing_context=_str_or_none(d.get("multiprocessing_context")),
            usage=_d(d.get("usage")),
            torch_warnings=tuple(str(w) for w in as_list(d.get("torch_warnings"))),
            raw=d,
        )

    @property
    def cpus(self) -> int:
        """CPUs this rank's workers may use (2 when not recorded)."""
        return int(self.cpus_per_rank or self.cpu_count or 2)


@dataclass(frozen=True)
class RunConfig:
    """Settings the run used: loaders, precision, optimizers, parallel wrappers, backend flags."""

    dataloaders: list[LoaderConfig] = field(default_factory=list)
    autocast: list[dict[str, Any]] = field(default_factory=list)
    grad_scalers: list[dict[str, Any]] = field(default_factory=list)
    optimizers: list[dict[str, Any]] = field(default_factory=list)
    optimizer_steps: int = 0
    measured_optimizer_steps: int = 0
    measured_backward_calls: int = 0
    """backward() calls in the measured steps (more than the optimizer steps: accumulation)."""
    ddp: list[dict[str, Any]] = field(default_factory=list)
    """DistributedDataParallel constructions."""
    backend_flags: dict[str, Any] = field(default_factory=dict)
    data_parallel: list[dict[str, Any]] | None = None
    """nn.DataParallel constructions; None when the run did not watch for them."""
    checkpointing: dict[str, Any] = field(default_factory=dict)
    """``torch.utils.checkpoint`` calls and the checkpointed forward's host seconds."""
    housekeeping: list[dict[str, Any]] = field(default_factory=list)
    """Timed housekeeping calls (``gc.collect``, ``copy.deepcopy``, ``empty_cache``...), one row
    per call site: ``{"what", "site", "calls", "seconds"...}``."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        dp = d.get("data_parallel")
        return cls(
            dataloaders=[LoaderConfig.from_dict(x) for x in _rows(d.get("dataloaders"))],
            autocast=_rows(d.get("autocast")),
            grad_scalers=_rows(d.get("grad_scalers")),
            optimizers=_rows(d.get("optimizers")),
            optimizer_steps=_count(d.get("optimizer_steps")),
            measured_optimizer_steps=_count(d.get("measured_optimizer_steps")),
            measured_backward_calls=_count(d.get("measured_backward_calls")),
            ddp=_rows(d.get("ddp")),
            backend_flags=_d(d.get("backend_flags")),
            data_parallel=_rows(dp) if dp is not None else None,
            checkpointing=_d(d.get("checkpointing")),
            housekeeping=_rows(d.get("housekeeping")),
        )

    @property
    def micro_batches_per_step(self) -> float:
        """backward() calls per optimizer step in the measured steps (1 without accumulation)."""
        steps = self.measured_optimizer_steps
        return self.measured_backward_calls / steps if steps else 1.0

    @property
    def autocast_dtypes(self) -> set[str]:
        """dtypes of the autocast regions that were enabled."""
        return {str(e["dtype"]) for e in self.autocast if e.get("enabled")}


@dataclass(frozen=True)
class SyncStats:
    """Host syncs (per call site), non_blocking copies from unpinned memory, sync-debug sites."""

    host_syncs: list[dict[str, Any]] = field(default_factory=list)
    """``{"kind", "device", "site", "calls", "seconds"}`` per site."""
    unpinned_non_blocking: list[dict[str, Any]] = field(default_factory=list)
    """``{"site", "copies", "bytes"}`` per site."""
    sync_debug: list[dict[str, Any]] = field(default_factory=list)
    sync_debug_steps: int = 0
    """Steps sync-debug mode watched (0: it watched the profiled window, older records)."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SyncStats:
        return cls(
            host_syncs=_rows(d.get("host_syncs")),
            unpinned_non_blocking=_rows(d.get("unpinned_non_blocking")),
            sync_debug=_rows(d.get("sync_debug")),
            sync_debug_steps=_count(d.get("sync_debug_steps")),
        )


@dataclass(frozen=True)
class GpuInfo:
    """The GPU (name, tensor-core support) and its memory statistics."""

    device: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    gpm: dict[str, Any] | None = None
    """GPU performance-monitor samples of the window (``capture/gpm.py``), when taken."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GpuInfo:
        gpm = d.get("gpm")
        return cls(
            device=_d(d.get("device")),
            memory=_d(d.get("memory")),
            gpm=gpm if isinstance(gpm, dict) else None,
        )

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
class OpSummary:
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

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OpSummary:
        basis = d.get("gemm_share_basis")
        return cls(
            top_level_ops_per_step=as_number(d.get("top_level_ops_per_step")),
            median_op_us=as_number(d.get("median_op_us")),
            op_time_ms_per_step=as_number(d.get("op_time_ms_per_step")),
            tiny_op_time_ms_per_step=as_number(d.get("tiny_op_time_ms_per_step")),
            tiny_op_threshold_us=as_number(d.get("tiny_op_threshold_us")),
            cpu_op_time_ms_per_step=as_number(d.get("cpu_op_time_ms_per_step")),
            gemm_share=as_number(d.get("gemm_share")),
            gemm_share_basis=str(basis) if basis else None,
            compute_share=as_number(d.get("compute_share")),
            compute_ms_per_step=as_number(d.get("compute_ms_per_step")),
            collective_time_ms_per_step=as_number(d.get("collective_time_ms_per_step")),
        )


@dataclass(frozen=True)
class RunOptions:
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

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunOptions:
        return cls(
            warmup_steps=_count(d.get("warmup_steps")),
            profile_steps=_count(d.get("profile_steps")),
            clean_steps=_count(d.get("clean_steps")),
            profile_memory=bool(d.get("profile_memory")),
            full=bool(d.get("full")),
        )


@dataclass(frozen=True)
class RunRecord:
    """One rank's ``run.json``, typed for the run rules."""

    schema_version: int = 0
    """The record's ``schema_version`` (0: a record older than the field); ``record/folder.py``
    refuses one newer than this code reads (``layout.RUN_SCHEMA_VERSION``)."""
    exit_status: str | None = None
    """``completed``, ``stopped`` (by check after the window), ``exception``, ..."""
    exit_code: int | None = None
    """The script's exit status (None when it recorded none)."""
    exit_exception: str | None = None
    """The exception that ended the script, as recorded."""
    exit_phase: str | None = None
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
    op_summary: OpSummary = field(default_factory=OpSummary)
    oom: dict[str, Any] | None = None
    lines: LineTable = field(default_factory=LineTable)
    """The sampled line table of the measured steps (``record/lines.py``)."""
    cpu: dict[str, Any] = field(default_factory=dict)
    """The host CPU counters as recorded (run-queue waits, other processes' busy cores...)."""
    roofline: dict[str, Any] = field(default_factory=dict)
    """Work per step, attainable rates and efficiency as recorded (``record/floors.py`` reads
    the floors from it)."""
    experiments: list[dict[str, Any]] = field(default_factory=list)
    """check's own measurements after the window, one row each (measured, skipped, failed)."""
    roof: Roofline = field(default_factory=Roofline)
    """``roofline`` typed (``record/account.py``), for the account and mode rules."""
    toggles: tuple[Experiment, ...] = ()
    """``experiments`` typed: each toggle measured inside the run."""
    modes: Modes = field(default_factory=Modes)
    """The global modes (anomaly detection, profiler, sync-debug...) and the lines that set them."""
    repeats: tuple[Repeat, ...] = ()
    """Construction work repeated inside the measured steps, one per user line and kind."""
    forwards: Forwards = field(default_factory=Forwards)
    """Forwards no backward reached, and modules called in a loop."""
    job: dict[str, Any] = field(default_factory=dict)
    """The job's length as the script names it (``{"name", "value", "unit"}``), when found."""
    monitor: dict[str, Any] = field(default_factory=dict)
    """The stack watcher's record (``source`` of its steps, ``long_step_samples``...)."""
    memory_steps: dict[str, Any] = field(default_factory=dict)
    """Memory per step, a column each (``rss_bytes``, ``cuda_allocated_bytes``...), and the
    device's ``snapshot`` of its largest holders when taken."""
    findings: list[dict[str, Any]] = field(default_factory=list)
    """The run-level findings check attached to the record (``report.json`` has the merged
    ones)."""
    trace: str | None = None
    """The trace file, relative to the run folder; None when none was written."""
    profiler_stopped_early: str | None = None
    """Why the profiler stopped before the window's end (its memory budget...), if it did."""
    framework: str | None = None
    """The trainer whose callback ran check (``lightning``, ``transformers``), if one did."""
    frameworks: tuple[str, ...] = ()
    """Trainers seen on the stack around the steps (for a hint to use their callback)."""
    notes: tuple[str, ...] = ()
    """torchdoctor's own failures, caught while the script went on."""
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunRecord:
        gpu, oom = d.get("gpu"), d.get("oom")
        version = d.get("schema_version")
        return cls(
            schema_version=version if isinstance(version, int) and version >= 0 else 0,
            exit_status=_d(d.get("exit")).get("status"),
            exit_code=as_int(_d(d.get("exit")).get("code")),
            exit_exception=_str_or_none(_d(d.get("exit")).get("exception")),
            exit_phase=_str_or_none(_d(d.get("exit")).get("phase")),
            options=RunOptions.from_dict(_d(d.get("options"))),
            script=_str_or_none(d.get("script")),
            argv=tuple(str(a) for a in as_list(d.get("argv"))),
            torch_version=_str_or_none(d.get("torch_version")),
            python_version=_str_or_none(d.get("python_version")),
            cuda_available=as_flag(d.get("cuda_available")),
            rank=_rank(_d(d.get("rank"))),
            steps=StepStats.from_dict(_d(d.get("steps"))),
            compile=CompileStats.from_dict(_d(d.get("compile"))),
            config=RunConfig.from_dict(_d(d.get("config"))),
            syncs=SyncStats.from_dict(_d(d.get("syncs"))),
            gpu=GpuInfo.from_dict(gpu) if isinstance(gpu, dict) and gpu else None,
            ops=_d(d.get("ops")),
            op_summary=OpSummary.from_dict(_d(d.get("ops"))),
            oom=oom if isinstance(oom, dict) and oom else None,
            lines=LineTable.from_dict(_d(d.get("lines"))),
            cpu=_d(d.get("cpu")),
            roofline=_d(d.get("roofline")),
            experiments=_rows(d.get("experiments")),
            roof=Roofline.from_dict(_d(d.get("roofline"))),
            toggles=tuple(Experiment.from_dict(r) for r in _rows(d.get("experiments"))),
            modes=Modes.from_dict(_d(d.get("modes"))),
            repeats=tuple(Repeat.from_dict(r) for r in _rows(d.get("repeats"))),
            forwards=Forwards.from_dict(_d(d.get("forwards"))),
            job=_d(d.get("job")),
            monitor=_d(d.get("monitor")),
            memory_steps=_d(d.get("memory_steps")),
            findings=_rows(d.get("findings")),
            trace=_str_or_none(d.get("trace")) if d.get("trace") else None,
            profiler_stopped_early=_str_or_none(_d(d.get("profiler")).get("stopped_early")),
            framework=_str_or_none(_d(d.get("framework")).get("name")),
            frameworks=tuple(str(f) for f in as_list(d.get("frameworks"))),
            notes=tuple(str(n) for n in as_list(d.get("notes"))),
            raw=d,
        )

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
