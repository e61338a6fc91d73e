"""Everything that accounts for the step beside the trace: where its time goes by the user's
line (a stack sampler), how much work it does (FLOPs and bytes, counted in one warm-up step)
against what the machine can do (the roofline), the global modes and repeated construction
that cost time, forwards that record autograd graphs for nothing, and the measured cost of
switching a mode for a few extra steps.

The schedule, driven by the step clock:

- warm-up step ``start_at`` (the one before the profiler's own warm-up): the FLOP/byte count
  and the forward watch (both slow that step, none of the measured ones);
- the measured steps: the stack sampler, the modes, the construction counters;
- the end of the window: the CPU's rates are measured (a fraction of a second), then the
  toggles run (``capture/experiments.py``) unless the script goes on (``--full``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchdoctor.capture import guest
from torchdoctor.capture.experiments import Experiments, Host, Toggle
from torchdoctor.capture.forward_watch import ForwardWatch
from torchdoctor.capture.line_table import OpIntervals, build_line_table
from torchdoctor.capture.modes import ModeWatch, sampler_probes
from torchdoctor.capture.options import CheckOptions
from torchdoctor.capture.repeats import RepeatWatch
from torchdoctor.capture.sampler import StackSampler
from torchdoctor.capture.workcount import DTYPES, StepCounter
from torchdoctor.code_paths import code_paths
from torchdoctor.rules.thresholds import MODE_ON_SHARE


class Accounting:
    """Owns the accounting probes of one run (see the module docstring)."""

    def __init__(
        self,
        options: CheckOptions,
        distributed: bool,
        compiled: Callable[[], bool],
        cuda: Callable[[], bool],
    ) -> None:
        self.options = options
        self.distributed = distributed
        self.compiled = compiled
        self.cuda = cuda
        self.paths = code_paths()
        self.modes = ModeWatch(self.paths)
        self.repeats = RepeatWatch(self.paths)
        self.forwards = ForwardWatch(self.paths)
        self.counter = StepCounter()
        self.sampler: StackSampler | None = None
        self.samples: Any = None
        self.count_skipped: str | None = (
            "the warm-up is too short to count a step (--warmup 3 or more)"
        )
        self.rates: Any = None
        self.rates_error: str | None = None
        self.experiments: Experiments | None = None
        self.experiment_host: Host | None = None
        """What the toggles read from the run (its clock) and call before their first step."""
        self._marks: list[int] | None = None

    # -- lifetime -------------------------------------------------------------------------------
    def install(self) -> None:
        """Install the mode and construction wrappers."""
        self.modes.install()
        self.repeats.install()

    def uninstall(self) -> None:
        """Stop every probe and restore everything (idempotent, never raises)."""
        for step in (
            self._stop_sampler,
            self.counter.end,
            self.forwards.end,
            self._abort_experiments,
            self.repeats.uninstall,
            self.modes.uninstall,
        ):
            try:
                step()
            except Exception as exc:
                guest.note("uninstalling the accounting probes", exc)

    # -- the schedule ---------------------------------------------------------------------------
    def count_begin(self) -> None:
        """Count the step's work (FLOPs, bytes). Not for compiled code: no dispatch mode sees
        its kernels."""
        if self.compiled():
            self.count_skipped = "compiled code runs kernels no dispatch mode sees"
            return
        self.count_skipped = None
        self.counter.begin()

    def count_end(self) -> None:
        """The counted step ended (the CPU's rates are measured now and again after the window:
        the best of two moments of a shared machine)."""
        counting = self.counter.counting
        self.counter.end()
        if counting and not self.cuda():
            self._measure_cpu()

    def forwards_begin(self) -> None:
        """Watch the step's forwards (global module hooks: never on compiled code, whose
        guards they would change: a recompile in the measured steps)."""
        if not self.compiled():
            self.forwards.begin()

    def forwards_end(self) -> None:
        self.forwards.end()

    def measuring(self, on: bool) -> None:
        """The measured steps begin (sampling starts) or counting restarts."""
        self.repeats.measuring = on
        if on:
            self.modes.note_window()
            if self.sampler is None:
                try:
                    from torchdoctor.capture.clock import StepClock

                    ours = frozenset({StepClock.tick.__code__})  # the window's bookkeeping
                    self.sampler = StackSampler(modes=sampler_probes(), paths=self.paths, ours=ours)
                    self.sampler.start()
                except Exception as exc:
                    guest.note("starting the stack sampler", exc)
        else:
            self._stop_sampler(discard=True)

    def wants_clock_marks(self, recording: bool) -> bool:
        """True once, in the first step boundary where the profiler records and we sample."""
        return recording and self._marks is None and self.sampler is not None

    def mark_clock(self, record_function: Any) -> None:
        """Emit two profiler markers at known ``perf_counter_ns`` times (the profiler is still
        recording): the line table aligns the sampler's clock with the trace's through them."""
        marks: list[int] = []
        for _ in range(2):  # the first record_function of a run pays a one-off set-up
            with record_function("torchdoctor#clock"):
                marks.append(time.perf_counter_ns())
        self._marks = marks

    def window_end(self) -> None:
        """The measured steps are over: stop sampling, measure the CPU again."""
        self.repeats.measuring = False
        self._stop_sampler()
        if self.counter.work is not None and not self.cuda():
            self._measure_cpu()

    def experiments_begin(self, full: bool) -> bool:
        """Start the toggles; False when there are none (or they may not run). Their time limit
        comes from the window's steps (``experiments.plan``); a toggle that cannot be measured
        cleanly is kept as skipped, with the reason, for the record. Before the first extra
        step the host writes the run's record (``experiment_host.before``)."""
        if full or self.distributed:
            return False
        import sys

        from torchdoctor.capture.experiments import plan

        try:
            toggles = self._toggles()
        except Exception as exc:
            guest.note("planning the mode measurements", exc)
            return False
        host = self.experiment_host
        steps, waits = host.window_times() if host is not None else ([], [])
        # in the order they run (``Toggle.last`` after the others): on a busy machine the
        # thread toggle's slow steps are the ones left without time, not a mode's
        runnable = sorted((t for t in toggles if t.skipped is None), key=lambda t: t.last)
        p = plan(steps, waits, len(runnable))
        for i, t in enumerate(runnable):
            if p.skip is not None:
                t.skipped = p.skip
            elif i >= p.toggles:
                t.skipped = f"no time left within the {p.budget_s:.0f} s limit of the extra steps"
        self.experiments = Experiments(
            toggles,
            p.budget_s,
            p,
            last_wait_s=host.last_wait_s if host is not None else None,
            last_core_s=host.last_core_s if host is not None else None,
        )
        for t in toggles:
            if t.skipped is not None:
                print(f"torchdoctor: not measuring {t.what}: {t.skipped}", file=sys.stderr)
        if not self.experiments.planned:
            self.experiments.abort()  # hooks a skipped toggle installed come off
            return False
        if host is not None:
            try:
                host.before()
            except Exception as exc:
                guest.note("writing the record before the mode measurements", exc)
        return self.experiments.begin()

    # -- helpers --------------------------------------------------------------------------------
    def _stop_sampler(self, discard: bool = False) -> None:
        if self.sampler is not None and self.sampler.running:
            samples = self.sampler.stop()
            self.samples = None if discard else samples
        if discard:
            self.sampler = None

    def _abort_experiments(self) -> None:
        if self.experiments is not None:
            self.experiments.abort()

    def _measure_cpu(self) -> None:
        from torchdoctor.capture.machine_rates import best_of, measure_cpu

        work = self.counter.work
        dtypes: tuple[str, ...] = ("fp32",)
        if work is not None and len(work):
            seen = {DTYPES[d] for d, f in zip(work.dtype, work.flops, strict=True) if f > 0}
            dtypes = tuple(d for d in ("fp32", "fp64", "bf16", "fp16") if d in seen) or dtypes
        try:
            self.rates = best_of(self.rates, measure_cpu(dtypes))
        except Exception as exc:
            self.rates_error = f"{type(exc).__name__}: {exc}"
            guest.note("measuring this CPU's rates", exc)

    def _toggles(self) -> list[Toggle]:
        import torch

        from torchdoctor.capture import toggles
        from torchdoctor.capture.modes import THREAD_ENV, cores_per_rank

        # Dynamo guards on the global state (grad mode, deterministic algorithms, the intra-op
        # thread count): switching one recompiles every compiled frame, and the arms would
        # time the recompiles, which the report must not charge to the script either.
        compiled = self.compiled()
        guard = "the model is compiled and {what} is one of dynamo's guards: switching it would recompile"
        out: list[Toggle] = []
        shares = self._mode_shares()
        if torch.is_anomaly_enabled() or shares.get("anomaly_detection", 0.0) >= MODE_ON_SHARE:
            out.append(toggles.anomaly_off())
        sites = {r.site for r in self.forwards.snapshot().unreached if r.site}
        if sites and compiled:
            what = "no grad for the forwards at " + ", ".join(sorted(sites))
            out.append(Toggle.skip("grad-without-backward", what, guard.format(what="grad mode")))
        elif sites:
            out.append(toggles.no_grad_at(self.paths, sites))
        threads, cores = torch.get_num_threads(), cores_per_rank()
        chosen = any(c["call"] == "set_num_threads" for c in self.modes.calls) or any(
            k in os.environ for k in THREAD_ENV
        )
        if threads < cores and chosen and self.modes.original_set_num_threads is not None:
            if compiled:
                what = f"{cores} intra-op threads instead of {threads}"
                reason = guard.format(what="the intra-op thread count (torch.set_num_threads)")
                out.append(Toggle.skip("few-intra-op-threads", what, reason))
            else:
                out.append(
                    toggles.more_threads(self.modes.original_set_num_threads, threads, cores)
                )
        if (
            torch.are_deterministic_algorithms_enabled()
            or shares.get("deterministic_algorithms", 0.0) >= MODE_ON_SHARE
        ):
            if compiled:
                reason = guard.format(what="torch.use_deterministic_algorithms")
                out.append(
                    Toggle.skip("deterministic-algorithms", "deterministic algorithms off", reason)
                )
            else:
                out.append(
                    toggles.deterministic_off(
                        self.modes.originals.get("use_deterministic_algorithms")
                    )
                )
        if torch.backends.mkldnn.is_available() and not torch.backends.mkldnn.enabled:
            out.append(toggles.backend_on(torch.backends.mkldnn, "mkldnn"))
        rebuilt = self._rebuilt_optimizers()
        if rebuilt:
            # first: the budget is shared in order
            out.insert(0, toggles.optimizer_built_once(self.repeats, rebuilt))
        return out

    def _rebuilt_optimizers(self) -> set[str]:
        """User lines that built an optimizer more than once in the measured steps (the
        finding decides whether that is every step; measuring one that is not costs a toggle's
        few steps and finds nothing)."""
        return {
            site
            for (kind, site), (calls, _) in self.repeats.sites.items()
            if kind == "optimizer" and calls >= 2
        }

    def _mode_shares(self) -> dict[str, float]:
        s = self.samples
        if s is None or not len(s):
            return {}
        return {
            name: sum(1 for f in s.flags if f & (1 << bit)) / len(s)
            for bit, name in enumerate(s.modes, 1)
        }

    # -- the record -----------------------------------------------------------------------------
    def snapshot(
        self, events: Any, steps: int, step_ms: float | None, gpu: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The accounting sections of ``run.json`` (see docs/check.md): ``modes``, ``repeats``,
        ``forwards`` and ``experiments`` as the record's rows (``record/account.py``), which
        ``record/write.py`` writes; a section whose watcher failed is ``{"error": ...}``."""
        out: dict[str, Any] = {}
        for key, build in (
            ("lines", lambda: self._lines(events, steps, step_ms)),
            ("roofline", lambda: self._roofline(step_ms, gpu)),
            ("modes", self.modes.snapshot),
            ("repeats", self.repeats.snapshot),
            ("forwards", self.forwards.snapshot),
            ("experiments", lambda: self.experiments.results() if self.experiments else []),
        ):
            try:
                out[key] = build()
            except Exception as exc:
                guest.note(f"summarising {key}", exc)
                out[key] = {"error": f"{type(exc).__name__}: {exc}"}
        return out

    def _lines(self, events: Any, steps: int, step_ms: float | None) -> dict[str, Any]:
        if self.samples is None:
            return {"samples": 0, "rows": [], "categories": {}, "unavailable": "no steps sampled"}
        if isinstance(events, Path):  # the exported trace: a few hundred bytes per event
            from torchdoctor.capture.trace_ops import clock_aligned_ops

            found = clock_aligned_ops(events, self._marks)
            ops = OpIntervals(*found) if found is not None else None
        else:
            ops = op_intervals(events, self._marks) if events is not None else None
        table = build_line_table(self.samples, ops, steps, step_ms)
        if ops is None:
            table["note"] = "no profiler events to align with: torch operators count as Python"
        return table

    def _roofline(self, step_ms: float | None, gpu: dict[str, Any] | None) -> dict[str, Any]:
        from torchdoctor import roofline

        work = self.counter.work
        out: dict[str, Any] = {}
        if work is None or not len(work):
            out["unavailable"] = self.count_skipped or "no operator was counted"
            return out
        device = 1 if gpu else 0
        idx = [i for i in range(len(work)) if work.device[i] == device]
        flops = [work.flops[i] for i in idx]
        nbytes = [work.bytes[i] for i in idx]
        # A convolution's FLOPs run at the convolution rate where one was measured ("fp32/conv").
        dtypes = [DTYPES[work.dtype[i]] + ("/conv" if work.conv[i] else "") for i in idx]
        out["work"] = {
            **work.summary(),
            "flops_per_step": sum(flops),
            "bytes_per_step": sum(nbytes),
        }
        att = self._attainable(gpu)
        if att is None:
            out["unavailable"] = self.rates_error or "no attainable rates for this device"
            return out
        out["attainable"] = att.to_dict()
        if step_ms:
            out["efficiency"] = roofline.efficiency(step_ms, flops, nbytes, dtypes, att).to_dict()
        return out

    def _attainable(self, gpu: dict[str, Any] | None) -> Any:
        if not gpu:
            return self.rates
        from torchdoctor import roofline

        device = gpu.get("device") or {}
        flags = gpu.get("backend_flags") or {}
        return roofline.attainable_gpu(
            str(device.get("name", "")),
            device.get("multi_processor_count"),
            tf32=bool(flags.get("tf32_matmul")),
        )


def op_intervals(events: Any, marks: list[int] | None) -> OpIntervals | None:
    """Top-level operators of the thread that emitted the clock markers, on the sampler's clock
    (``perf_counter_ns``); None without markers."""
    if not marks:
        return None
    found = [e for e in events if e.name == "torchdoctor#clock"]
    if len(found) < 2:
        return None
    marker = found[-1]
    offset = int(marker.time_range.start * 1000) - marks[-1]
    thread = marker.thread
    rows = []
    for e in events:
        if e.thread != thread or not e.name.startswith("aten::"):
            continue
        parent = e.cpu_parent
        if parent is not None and parent.name.startswith("aten::"):
            continue
        rows.append(
            (int(e.time_range.start * 1000) - offset, int(e.time_range.end * 1000) - offset, e.name)
        )
    rows.sort()
    return OpIntervals([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
