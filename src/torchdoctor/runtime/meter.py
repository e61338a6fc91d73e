"""Step time, throughput and MFU of the training loop.

A step is the interval between two consecutive optimizer steps. On CUDA each boundary records a
device event (read later, so the loop never waits for the GPU); elsewhere it reads the host clock
after synchronising the device. The first step, steps that compiled and the step whose FLOPs were
counted are kept apart from the steady-state statistics.
"""

from __future__ import annotations

import itertools
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from torchdoctor import stats
from torchdoctor.hardware import is_mig, lookup_gpu

_UNKNOWN_GPU_WARNED: set[str] = set()
_NOISY_IQR_SHARE = 0.10  # IQR above 10% of the median: the machine was busy, say so
_RESOLVE_EVERY = 2048  # step boundaries kept unresolved before converting them to durations


@dataclass(frozen=True)
class MeterSummary:
    """Steady-state numbers of a run (this process; per-GPU under DDP)."""

    steps: int
    """Steady-state steps timed."""
    step_time_ms: float | None
    """Median steady-state step time, in ms."""
    step_time_iqr_ms: float | None
    """Interquartile range of the step times, in ms."""
    samples_per_s: float | None
    """Samples over the steady-state steps / their total time."""
    tokens_per_s: float | None
    """Tokens over the steady-state steps / their total time (None when batches carry no token
    ids)."""
    flops_per_step: float | None
    """FLOPs of one step's forward and backward (measured once, or supplied)."""
    achieved_flops: float | None
    """flops_per_step * steady-state steps / their total time, in FLOP/s: the same basis as
    samples_per_s, so a stall counts against both (a median would hide it)."""
    peak_flops: float | None
    """Dense peak FLOP/s of this device for peak_dtype (None: not a known GPU)."""
    peak_dtype: str
    """The dtype the peak is taken for (bf16, fp16, tf32, fp32)."""
    mfu: float | None
    """achieved_flops / peak_flops (model FLOPs utilisation, 0..1)."""
    device_name: str
    """The device as CUDA names it, or the device type."""
    timing: str
    """"cuda events" or "host clock"."""
    first_step_s: float | None
    """The first step, in seconds (warm-up; includes the first compile)."""
    compile_steps: int
    """Steps that compiled or recompiled (excluded from the steady state)."""
    compile_time_s: float
    """Time of the calls that compiled, in seconds."""
    skipped_steps: int
    """Optimizer steps the GradScaler skipped for inf/NaN gradients."""
    notes: tuple[str, ...] = ()
    """Caveats: uncounted attention FLOPs, an unknown GPU, a noisy machine."""
    step_time_mean_ms: float | None = None
    """Total steady-state time / steps, in ms: the step time throughput, FLOP/s and MFU imply."""

    def __str__(self) -> str:
        return format_summary(self)


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def _si(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def format_summary(s: MeterSummary) -> str:
    """Plain-text rendering of a summary."""
    mfu = "n/a"
    if s.mfu is not None and s.peak_flops is not None:
        mfu = f"{100 * s.mfu:.1f}% of {s.peak_flops / 1e12:.1f} TFLOP/s {s.peak_dtype}"
    lines = [
        f"steps (steady state) : {s.steps}  [{s.timing}, {s.device_name}]",
        f"step time            : {_fmt(s.step_time_ms, '.2f', ' ms')} median, IQR {_fmt(s.step_time_iqr_ms, '.2f', ' ms')}"
        f"; mean {_fmt(s.step_time_mean_ms, '.2f', ' ms')}",
        f"throughput           : {_fmt(s.samples_per_s, ',.1f', ' samples/s')}"
        + (f", {s.tokens_per_s:,.0f} tokens/s" if s.tokens_per_s else ""),
        f"FLOPs per step       : {_si(s.flops_per_step, 'FLOP')}",
        f"achieved             : {_si(s.achieved_flops, 'FLOP/s')}",
        f"MFU                  : {mfu}",
        f"first step           : {_fmt(s.first_step_s, '.2f', ' s')}; compile: {s.compile_steps} steps, {s.compile_time_s:.1f} s",
    ]
    if s.skipped_steps:
        lines.append(
            f"skipped steps        : {s.skipped_steps} (GradScaler found inf/NaN gradients)"
        )
    lines += [f"note: {n}" for n in s.notes]
    return "\n".join(lines)


class Meter:
    """Collects step boundaries and batch sizes; ``summary()`` turns them into numbers."""

    def __init__(
        self,
        device: torch.device,
        *,
        peak_dtype: str = "fp32",
        flops_per_step: float | None = None,
        use_events: bool | None = None,
    ) -> None:
        """``use_events``: time with CUDA events (default: on CUDA devices)."""
        self.device = device
        self.peak_dtype = peak_dtype
        self.flops_per_step = flops_per_step
        self.flops_note: str | None = None
        self.tokens_per_sample: int | None = None
        """Set this when batches do not carry (batch, sequence) token ids."""
        self._events = device.type == "cuda" if use_events is None else use_events
        # Boundaries not yet turned into durations: CUDA events or host times.
        self._marks: list[Any] = []
        self._started = False
        self._done: list[float] = []  # durations of the steps already resolved, in seconds
        self._flags: list[str] = []  # per step (between marks i and i+1): "", "compile", "flops"
        self._samples: list[int] = []
        self._tokens: list[int] = []
        self._cur_samples = 0
        self._cur_tokens = 0
        self._cur_flag = ""
        self.compile_time_s = 0.0
        self.skipped: Any = 0  # an int, or a device tensor summed without synchronising

    # -- recording (called by the runtime) ----------------------------------------------------
    @property
    def started(self) -> bool:
        """Whether the first boundary was marked."""
        return self._started

    def start(self) -> None:
        """Mark the beginning of the first step."""
        if not self._started:
            self._started = True
            self._marks.append(self._now())

    def count_batch(self, samples: int, tokens: int | None) -> None:
        """Add one (micro-)batch to the current step."""
        self._cur_samples += samples
        if tokens is not None:
            self._cur_tokens += tokens
        elif self.tokens_per_sample:
            self._cur_tokens += samples * self.tokens_per_sample

    def flag_step(self, flag: str) -> None:
        """Keep the current step out of the steady state ("compile" or "flops")."""
        self._cur_flag = self._cur_flag or flag

    def note_compile(self, seconds: float) -> None:
        """A call in the current step compiled for ``seconds``."""
        self.compile_time_s += seconds
        self.flag_step("compile")

    def step_end(self) -> None:
        """Mark the end of an optimizer step."""
        if not self._started:
            self.start()
        self._marks.append(self._now())
        if len(self._marks) > _RESOLVE_EVERY:
            self._resolve(len(self._marks) // 2)
        self._flags.append(self._cur_flag)
        self._samples.append(self._cur_samples)
        self._tokens.append(self._cur_tokens)
        self._cur_samples = self._cur_tokens = 0
        self._cur_flag = ""

    @property
    def steps(self) -> int:
        """Optimizer steps recorded."""
        return len(self._flags)

    def _now(self) -> Any:
        if self.device.type == "cpu" and not self._events:
            return time.perf_counter()  # the CPU ran the step synchronously: nothing to wait for
        if self._events:
            event = torch.cuda.Event(enable_timing=True)
            # record() alone uses the *current* device's stream: name this meter's device.
            event.record(torch.cuda.current_stream(self.device))
            return event
        sync = getattr(getattr(torch, self.device.type, None), "synchronize", None)
        if callable(sync):
            sync()  # the host clock means nothing while the device is still running
        return time.perf_counter()

    def _resolve(self, upto: int) -> None:
        # Turn marks[0..upto] into durations, keeping marks[upto] as the next start; bounded
        # memory on long runs. Old events finished long ago, so this does not stall the GPU.
        marks = self._marks[: upto + 1]
        if self._events:
            marks[-1].synchronize()
            self._done += [a.elapsed_time(b) / 1e3 for a, b in itertools.pairwise(marks)]
        else:
            self._done += [b - a for a, b in itertools.pairwise(marks)]
        del self._marks[:upto]

    def _durations_s(self) -> list[float]:
        if len(self._marks) > 1:
            self._resolve(len(self._marks) - 1)
        return list(self._done)

    # -- results ------------------------------------------------------------------------------
    def _device_name(self) -> str:
        if self.device.type == "cuda":
            return str(torch.cuda.get_device_name(self.device))
        return self.device.type

    def _peak(self, name: str) -> tuple[float | None, str | None]:
        if self.device.type != "cuda":
            return None, None
        # A MIG slice has a share of the GPU's multiprocessors, and of its peak.
        sms = (
            torch.cuda.get_device_properties(self.device).multi_processor_count
            if is_mig(name)
            else None
        )
        spec = lookup_gpu(name, sms)
        if spec is None:
            if name not in _UNKNOWN_GPU_WARNED:
                _UNKNOWN_GPU_WARNED.add(name)
                warnings.warn(
                    f"torchdoctor: no peak FLOP/s known for {name!r}; MFU not reported",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return None, f"no peak FLOP/s known for {name!r}, so no MFU"
        return spec.peak(self.peak_dtype), None

    def _rates(self, steps: list[int], seconds: float) -> tuple[float | None, float | None]:
        """(samples/s, tokens/s) over ``steps``; None where nothing was counted."""
        samples = sum(self._samples[i] for i in steps)
        tokens = sum(self._tokens[i] for i in steps)
        return (
            (samples / seconds or None, tokens / seconds or None) if seconds > 0 else (None, None)
        )

    def summary(self) -> MeterSummary:
        """Steady-state statistics so far (synchronises with the device once)."""
        durations = self._durations_s()
        steady = [i for i, flag in enumerate(self._flags) if flag == "" and i > 0]
        times = [durations[i] for i in steady]
        notes: list[str] = []
        name = self._device_name()
        peak, peak_note = self._peak(name)
        notes += [n for n in (self.flops_note, peak_note) if n]
        med = iqr = mean = samples_s = tokens_s = achieved = mfu = None
        if times:
            spread = stats.describe(times)
            med, iqr, mean = spread.median, spread.iqr, sum(times) / len(times)
            if med > 0 and iqr / med > _NOISY_IQR_SHARE:
                notes.append(
                    f"step times vary (IQR {100 * iqr / med:.0f}% of the median): a busy machine or an uneven workload"
                )
            samples_s, tokens_s = self._rates(steady, sum(times))
            if self.flops_per_step and mean > 0:
                # Total FLOPs over total time, like throughput: MFU and samples/s never disagree.
                achieved = self.flops_per_step / mean
                mfu = achieved / peak if peak else None
        skipped = (
            int(self.skipped.item())
            if isinstance(self.skipped, torch.Tensor)
            else int(self.skipped)
        )
        return MeterSummary(
            steps=len(times),
            step_time_ms=None if med is None else med * 1e3,
            step_time_iqr_ms=None if iqr is None else iqr * 1e3,
            step_time_mean_ms=None if mean is None else mean * 1e3,
            samples_per_s=samples_s,
            tokens_per_s=tokens_s,
            flops_per_step=self.flops_per_step,
            achieved_flops=achieved,
            peak_flops=peak,
            peak_dtype=self.peak_dtype,
            mfu=mfu,
            device_name=name,
            timing="cuda events" if self._events else "host clock",
            first_step_s=durations[0] if durations else None,
            compile_steps=sum(1 for f in self._flags if f == "compile"),
            compile_time_s=self.compile_time_s,
            skipped_steps=skipped,
            notes=tuple(notes),
        )
