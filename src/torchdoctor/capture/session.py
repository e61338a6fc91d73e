"""One watched run: installs every hook, drives the profiled window, and assembles the record
that becomes ``run.json``."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from torchdoctor.capture import cpu_usage, gpu_probe, guest, markers
from torchdoctor.capture.accounting import Accounting
from torchdoctor.capture.checkpointing import CheckpointWatch
from torchdoctor.capture.clock import StepClock
from torchdoctor.capture.compile_watch import CompileWatch
from torchdoctor.capture.config_probe import ConfigProbe
from torchdoctor.capture.dynamo_aside import DynamoAside
from torchdoctor.capture.forward_steps import ForwardSteps
from torchdoctor.capture.hooks import StepHooks
from torchdoctor.capture.housekeeping import HousekeepingWatch
from torchdoctor.capture.kernel_window import KernelProfiler
from torchdoctor.capture.monitor import Monitor
from torchdoctor.capture.options import CheckOptions
from torchdoctor.capture.profiling import WindowProfiler
from torchdoctor.capture.runfolder import RankInfo
from torchdoctor.capture.switchboard import KERNEL_STEPS, Instrument, Switchboard
from torchdoctor.capture.syncs import SyncRecorder
from torchdoctor.capture.timed_window import TimedWindow, WindowTiming, compiled_steps, script_cuda
from torchdoctor.capture.watcher import Watchers
from torchdoctor.record.run import GpuInfo, RunConfig, StepStats
from torchdoctor.record.write import RankPlace, RunHeader, run_document


def _cuda_in_use() -> bool:
    # Only a script that already touched CUDA gets CUDA probes; we never initialise it ourselves.
    import torch

    # is_initialized first: it reads a flag, while is_available() starts the CUDA driver.
    return bool(torch.cuda.is_initialized() and torch.cuda.is_available())


def _plan_words(opts: CheckOptions) -> str:
    """The schedule in one line for standard error."""
    sched = opts.schedule
    clean = (
        f"steps {sched.clean[0]}-{sched.clean[1]} timed clean, " if sched.clean is not None else ""
    )
    return (
        f"{clean}profiling steps {sched.lead + 1}-{sched.last_profiled} after "
        f"{opts.warmup_steps} warm-up steps"
    )


def _schedule_record(clock: StepClock, board: Switchboard | None = None) -> dict[str, Any]:
    """The schedule as it ran: on a GPU the kernel and sync-debug windows come before the after
    window; with the switchboard's record of what was armed in each window."""
    out = clock.schedule.to_dict()
    extra = clock.extra_windows
    for name in ("kernels", "sync-debug"):
        out[name.replace("-", "_")] = list(extra[name]) if name in extra else None
    after = clock.schedule.after
    if extra and after:
        last = max(b for _, b in extra.values())
        out["after"] = [last + 1, last + after[1] - after[0] + 1]
    if board is not None:
        out["instruments"] = board.record()
    return out


class Session:
    """Hooks, clock and probes for one run of a script (one rank)."""

    def __init__(self, options: CheckOptions, folder: Path, rank: RankInfo) -> None:
        self.options = options
        self.folder = folder
        self.rank = rank
        self.clock = StepClock(options, self)
        self.hooks = StepHooks(self.clock)
        self.config = ConfigProbe()
        self.hooks.optimizer_built = lambda: bool(self.config.optimizers)
        self.syncs = SyncRecorder()
        self.checkpoints = CheckpointWatch()
        self.housekeeping = HousekeepingWatch()
        # The tensor-method and checkpoint wrappers come off while dynamo traces (no graph
        # break of ours); SyncRecorder keeps its Patcher private, it is shared here only.
        self.forward = ForwardSteps(self.clock, lambda: self.aside.ensure_registered())
        self.forward.training = lambda: bool(self.config.optimizers)
        self.aside = DynamoAside(
            [self.syncs._patcher, self.checkpoints._patcher, self.forward.patcher]
        )
        self.compile = CompileWatch(on_compile_call=self.aside.ensure_registered)
        self.profiler = WindowProfiler(options)
        self.monitor = Monitor(self)
        self.measure_start_unix_s: float | None = None
        """When the warm-up ended: the clean window's start, else the measured steps' start
        (compiles after it are the run's recompiles "after warm-up")."""
        self.gpu: dict[str, Any] = {}
        self._nvml: gpu_probe.NvmlSampler | None = None
        self.started_unix_s = time.time()
        self.memory_history = False
        self.oom_watch: gpu_probe.OomWatch | None = None
        self.cpu: dict[str, Any] | None = None
        """Who had the CPU during the window (``capture/cpu_usage.py``)."""
        self._cpu_start: cpu_usage.CpuSample | None = None
        self._window_batches: dict[int, float] = {}
        self._cpu_pids: dict[int, list[int]] = {}
        self.main_tid = cpu_usage.main_thread_id()
        self.trace_file: Path | None = None
        """The exported trace, once written (the operator summary is read from it)."""
        self.job: dict[str, Any] | None = None
        """The job's length as the script names it (``capture/job_length.py``)."""
        self.accounting = Accounting(options, rank.distributed, self._compiled, _cuda_in_use)
        self.framework: dict[str, Any] | None = None
        """A framework callback that stepped aside for this session says who it is here."""
        self.timed: dict[str, WindowTiming] = {}
        """The windows timed by their step boundaries alone (``clean``, ``after``)."""
        self._timing: TimedWindow | None = None
        self._gpm: Any = None
        """NVML's GPM window over the clean steps (``capture/gpm.py``), while it runs."""
        self.watchers = Watchers()
        """Every watcher, in install order (``capture/watcher.py``)."""
        self.kernels = KernelProfiler()
        self.kernel_summary: dict[str, Any] | None = None
        """The kernel window's GPU activity per step (``capture/kernel_window.py``)."""
        self._profiler_warmup = 0
        self.board = Switchboard(_cuda_in_use)
        """What is armed in which window (``capture/switchboard.py``: the plan)."""
        for instrument in self._instruments():
            self.board.add(instrument)
        for name, watcher in (
            ("compile", self.compile),
            ("checkpoint", self.checkpoints),
            ("housekeeping", self.housekeeping),
            ("configuration", self.config),
            ("host sync", self.syncs),
            ("step hooks", self.hooks),
            ("forward", self.forward),
            ("dynamo aside", self.aside),
            ("accounting", self.accounting),
        ):
            self.watchers.add(name, watcher)

    # -- lifetime -----------------------------------------------------------------------------
    def install(self) -> None:
        """Install every hook and start the clock."""
        early = [name for name in self.watchers.names if name != "accounting"]
        self.watchers.install(*early)
        guest.reset()
        guest.flush_deferred()
        self.watchers.install("accounting")
        guest.set_active(self)
        markers.set_clock(self.clock)
        if self.rank.rank == 0:
            opts = self.options
            print(
                f"torchdoctor: watching; {_plan_words(opts)}",
                file=sys.stderr,
            )
        self.clock.begin()
        self.monitor.start()

    @property
    def snapshot_file(self) -> str:
        """The memory snapshot's name in the run folder (one per rank under torchrun)."""
        return gpu_probe.snapshot_name(self.rank.rank if self.rank.distributed else None)

    def start_memory_recording(self) -> None:
        """--memory: record allocation stacks and watch for OOMs from here on.

        Called at the window's start with CUDA already initialised by the script: starting
        earlier would initialise CUDA ourselves (before the script's CUDA_VISIBLE_DEVICES, and
        breaking forked CUDA children)."""
        import torch

        if self.options.profile_memory and not self.memory_history:
            # Python frames only: symbolising C++ frames for 200k entries takes minutes.
            torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
            self.memory_history = True
        if self.oom_watch is None:
            watch = gpu_probe.OomWatch(torch.cuda, self.folder, self.snapshot_file)
            if gpu_probe.attach_oom_watch(torch._C, watch):
                self.oom_watch = watch

    def stop_memory_history(self) -> None:
        """Stop recording allocation stacks and observing OOMs (after any OOM snapshot)."""
        if self.oom_watch is not None:
            self.oom_watch.close()
        if self.memory_history:
            import torch

            torch.cuda.memory._record_memory_history(enabled=None)
            self.memory_history = False

    def uninstall(self) -> None:
        """Remove every hook (idempotent); the profiler stops if the window is still open."""
        markers.set_clock(None)
        self.monitor.stop()
        self.board.close_all(self.clock.steps)  # a script that ended inside a window
        self.watchers.uninstall()  # the last installed first: patches unwind in order
        self.profiler.stop()
        self.syncs.stop_sync_debug()
        self._stop_gpu_sampling()
        # Hooks removed inside an optimizer step (the window ended in its hook) were only
        # neutralised: remove them now, so that no global module hook of ours outlives the run
        # (torch.compile warns about, and works around, global module hooks).
        guest.flush_deferred()
        self.clock.close()
        if guest.active_session() is self:
            guest.set_active(None)

    def _compiled(self) -> bool:
        """The script compiled something so far (a torch.compile call, or dynamo ran)."""
        return self.compile.compiled()

    # -- the switchboard ----------------------------------------------------------------------
    def _instruments(self) -> list[Instrument]:
        """Every instrument the plan names (``capture/switchboard.py``), as the session arms
        and disarms it."""
        acc = self.accounting
        return [
            Instrument("work count", lambda w: acc.count_begin(), lambda w: acc.count_end()),
            Instrument(
                "forward watch", lambda w: acc.forwards_begin(), lambda w: acc.forwards_end()
            ),
            Instrument("step events", self._events_arm, self._events_disarm, self._events_abort),
            Instrument("GPU counters", self._gpm_arm, self._gpm_disarm, gpu=True),
            Instrument(
                "profiler",
                lambda w: self.profiler.start(self._profiler_warmup),
                lambda w: self.profiler.stop(),
                lambda w: self.profiler.abort(),
            ),
            Instrument("NVML sampler", self._nvml_arm, self._nvml_disarm, gpu=True),
            # on until the run ends: an OOM after the window still gets its snapshot
            Instrument(
                "memory history",
                lambda w: self.start_memory_recording(),
                lambda w: None,
                gpu=True,
            ),
            Instrument(
                "line sampler",
                lambda w: acc.measuring(True),
                lambda w: acc.window_end(),
                lambda w: acc.measuring(False),
            ),
            Instrument(
                "sync and copy counters",
                lambda w: self.watchers.set_measuring(True),
                lambda w: self.watchers.set_measuring(False),
            ),
            Instrument(
                "CPU usage",
                lambda w: self._cpu_window_start(),
                lambda w: self._cpu_window_end(),
                lambda w: setattr(self, "_cpu_start", None),
            ),
            Instrument(
                "kernel profiler",
                lambda w: self.kernels.start(),
                self._kernels_disarm,
                lambda w: self.kernels.abort(),
                gpu=True,
            ),
            Instrument(
                "sync-debug mode",
                lambda w: self.syncs.start_sync_debug(),
                lambda w: self.syncs.stop_sync_debug(),
                gpu=True,
            ),
            # each toggle switches its own mode for its own steps (capture/experiments.py)
            Instrument("toggles", lambda w: None, lambda w: acc._abort_experiments()),
        ]

    def _events_arm(self, window: str) -> None:
        self._timing = TimedWindow(window, self.clock.steps + 1, script_cuda())
        self._timing.start()
        if window == "clean" and self.measure_start_unix_s is None:
            self.measure_start_unix_s = self._timing.wall_start

    def _events_disarm(self, window: str) -> None:
        """Read the window; it is kept for ``run.json``."""
        timing, self._timing = self._timing, None
        if timing is None:
            return
        host = list(self.clock.step_s[timing.first_step - 1 :])
        result = timing.finish(host)
        try:  # a step that compiled is not a steady one (compiles are named apart)
            starts = self.compile.start_times()
            marked = compiled_steps(timing.first_step, timing.wall_start, timing.wall_ends, starts)
            result = dataclasses.replace(result, compiled_steps=marked)
        except Exception as exc:
            guest.note("placing compiles in the timed steps", exc)
        self.timed[window] = result

    def _events_abort(self, window: str) -> None:
        self._timing = None
        self.timed.pop(window, None)

    def _gpm_arm(self, window: str) -> None:
        import torch

        self._gpm_start(torch.cuda)

    def _gpm_disarm(self, window: str) -> None:
        if self._gpm is not None:  # the counters over the clean steps
            self.gpu["gpm"] = self._gpm.stop()
            self._gpm = None

    def _nvml_arm(self, window: str) -> None:
        import os

        import torch

        pynvml = gpu_probe.try_import_pynvml()
        if pynvml is not None and not torch.version.hip:
            self._nvml = gpu_probe.nvml_sampler(
                pynvml,
                torch.cuda,
                gpu_probe.script_device(torch.cuda, self.rank.local_rank),
                self.options.nvml_interval_s,
                os.environ.get("CUDA_VISIBLE_DEVICES"),
            )
            self._nvml.start()

    def _nvml_disarm(self, window: str) -> None:
        if self._nvml is not None:
            self.gpu["nvml"] = self._nvml.stop()
            self._nvml = None

    def _kernels_disarm(self, window: str) -> None:
        steps = self.clock.extra_windows.get(window)
        n = steps[1] - steps[0] + 1 if steps else KERNEL_STEPS
        self.kernel_summary = self.kernels.stop(n)

    # -- the step clock's calls (clock.LISTENER_CALLS) ----------------------------------------
    def window_start(self, profiler_warmup_steps: int) -> None:
        """The profiled window: the profiler, and on CUDA NVML and --memory's history."""
        self._profiler_warmup = profiler_warmup_steps
        self.config.note_window()
        self.aside.ensure_registered()  # again: torch._dynamo.reset() drops the callbacks
        # --clean-steps 0 keeps the old schedule: sync-debug mode inside the profiled window
        stacked = ("sync-debug mode",) if self.clock.schedule.after is None else ()
        self.board.enter("profiled", self.clock.steps, also=stacked)

    def window_step(self) -> None:
        """Mark a step boundary in the trace (and, for model-call steps, that they are
        inference iterations, so the trace analysis reads them as such)."""
        if self.accounting.wants_clock_marks(self.clock.steps > self.clock.schedule.lead):
            import torch  # markers while the profiler records: they align the line table

            self.accounting.mark_clock(torch.profiler.record_function)
        self.profiler.step()
        if self.clock.source == "forward":
            self.forward.mark_step()

    def window_end(self) -> None:
        """Disarm the measured and profiled windows; say what happens next."""
        steps = self.clock.steps
        self.board.leave("measured", steps)
        self.board.leave("profiled", steps)
        self._read_job_length()
        self._stop_gpu_sampling()
        if self.rank.rank == 0:
            first, last = self.clock.window_steps or (0, 0)
            then = "continuing (--full)" if self.options.full else "stopping the script"
            print(f"torchdoctor: steps {first}-{last} profiled; {then}", file=sys.stderr)

    def _read_job_length(self) -> None:
        """The script's own step or epoch count, while its module is still ``__main__``."""
        try:
            from torchdoctor.capture.job_length import job_length

            main = sys.modules.get("__main__")
            self.job = job_length(vars(main)) if main is not None else None
        except Exception:
            self.job = None

    def _cpu_window_start(self) -> None:
        pids = self.hooks.worker_pids()
        self._window_batches = {k: u["measured_batches"] for k, u in self.hooks.usage.items()}
        self._cpu_start = cpu_usage.sample([p for ps in pids.values() for p in ps])
        self._cpu_pids = pids

    def _cpu_window_end(self) -> None:
        """The window's CPU record, and per loader its workers' CPU time and batches."""
        a = self._cpu_start
        if a is None:
            return
        import torch

        pids = self.hooks.worker_pids()
        b = cpu_usage.sample([p for ps in pids.values() for p in ps])
        import os

        self.cpu = {
            **cpu_usage.window_record(
                a, b, self.main_tid, torch.get_num_threads(), torch.get_num_interop_threads()
            ),
            "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        }
        for key, use in self.hooks.usage.items():
            worker_pids = set(pids.get(key, [])) | set(self._cpu_pids.get(key, []))
            live = [p for p in worker_pids if p in b.workers]
            ran = [b.workers[p][0] - a.workers.get(p, (0, 0))[0] for p in live]
            waited = [b.workers[p][1] - a.workers.get(p, (0, 0))[1] for p in live]
            use["window_batches"] = use["measured_batches"] - self._window_batches.get(key, 0.0)
            use["window_s"] = self.cpu["wall_s"]
            if ran:
                use["window_workers"] = len(ran)
                use["window_worker_cpu_s"] = sum(ran) / 1e9
                use["window_worker_runqueue_wait_s"] = sum(waited) / 1e9
        self._cpu_start = None

    def window_abort(self) -> None:
        """Discard the profiler's recording (the step signal changed, or the script forked
        while it recorded: a running profiler cannot be forked). The measured steps' own
        counters go on: a stronger signal stops them itself (``set_measuring(False)``), and
        after a fork the steps are still the script's."""
        self.board.abort(self.clock.steps, "profiled", "probe", "kernels", "sync-debug")
        self._stop_gpu_sampling()
        self.accounting._abort_experiments()

    def set_measuring(self, on: bool) -> None:
        """The measured steps begin (on) or counting restarts (off)."""
        if on:
            if self.measure_start_unix_s is None:  # no clean window started the count
                self.measure_start_unix_s = time.time()
            self.board.enter("measured", self.clock.steps)
        else:  # counting restarts (a stronger step signal)
            self.board.abort(self.clock.steps, "measured")
            self.measure_start_unix_s = None

    def enter(self, window: str) -> None:
        """A window of the plan begins: the probe step (count its work, watch its forwards), or
        one timed by its boundaries alone (``capture/timed_window.py``)."""
        self.board.enter(window, self.clock.steps)

    def leave(self, window: str) -> None:
        """That window's steps ended: disarm it (a timed one is kept for ``run.json``)."""
        self.board.leave(window, self.clock.steps)
        extra = self.clock.extra_windows.get(window)
        if window == "sync-debug" and extra:  # its counts are per that many steps
            self.syncs.sync_debug_steps = extra[1] - extra[0] + 1

    def experiments_begin(self) -> bool:
        """After the window: switch modes for a few extra steps to measure their cost."""
        started = self.accounting.experiments_begin(self.options.full)
        if started:  # the extra steps are the toggles' own: no sync, copy or batch counts
            self.watchers.set_measuring(False)
            self.board.enter("experiments", self.clock.steps)
        if started and self.rank.rank == 0:
            ex = self.accounting.experiments
            what = "; ".join(t.what for t in ex.toggles) if ex is not None else ""
            print(f"torchdoctor: measuring a few more steps with {what}", file=sys.stderr)
        return started

    def experiment_tick(self, step_s: float) -> bool:
        """One extra step ended; False when the toggles are done."""
        ex = self.accounting.experiments
        return ex is not None and ex.tick(step_s)

    # -- the timed windows ------------------------------------------------------------------
    def timed_step(self, name: str, host_end_s: float) -> None:
        """One step of that window ended."""
        if self._timing is not None:
            self._timing.step(host_end_s)

    def timed_abort(self) -> None:
        """The step signal changed: what was timed measured other steps."""
        self.board.abort(self.clock.steps, "clean", "after", "kernels")
        self.timed.clear()

    def _gpm_start(self, cuda: Any) -> None:
        """NVML's GPM counters (Hopper and later) over the clean steps, when NVML answers."""
        import os

        from torchdoctor.capture.gpm import gpm_window, unavailable

        try:
            device = gpu_probe.script_device(cuda, self.rank.local_rank)
            window = gpm_window(
                gpu_probe.try_import_pynvml(),
                cuda,
                device,
                os.environ.get("CUDA_VISIBLE_DEVICES"),
            )
            if window is None:
                self.gpu["gpm"] = unavailable("nvidia-ml-py not installed")
                return
            window.start()
            self._gpm = window
        except Exception as exc:  # counters are a bonus: the clean window goes on
            guest.note("starting the GPU counters", exc)

    def extra_window_begin(self, name: str) -> bool:
        """On a GPU, the kernel window and sync-debug mode, each in steps of its own (True:
        started). Before the kernel window the profiled trace is written: the profiler that
        recorded it is done, and the next session never overlaps its results."""
        if not _cuda_in_use():
            return False
        if name == "kernels" and not self._export_trace():
            return False
        self.board.enter(name, self.clock.steps)
        return True

    def _export_trace(self) -> bool:
        """Write the profiled window's trace now (True: written, or nothing to write)."""
        if self.trace_file is not None or getattr(self.profiler, "prof", None) is None:
            return True
        from torchdoctor.capture.runfolder import trace_path

        try:
            self.trace_file = self.profiler.export(trace_path(self.folder, self.rank))
        except Exception as exc:
            guest.note("writing the trace before the kernel window", exc)
            return False
        return True

    def _stop_gpu_sampling(self) -> None:
        """The device's memory and identity, read once after the profiled window."""
        if _cuda_in_use() and "memory" not in self.gpu:
            import torch

            device = gpu_probe.script_device(torch.cuda, self.rank.local_rank)  # rank k: cuda:k
            self.gpu["memory"] = gpu_probe.memory_record(torch.cuda, device)
            self.gpu["device"] = gpu_probe.device_record(torch.cuda, device)

    # -- the record ---------------------------------------------------------------------------
    def step_times(self) -> StepStats:
        """The clock's steps so far, and which of them are measured."""
        clock, opts = self.clock, self.options
        return StepStats.measure(
            source=clock.source,
            step_ms=[s * 1e3 for s in clock.step_s],
            data_wait_ms=[s * 1e3 for s in clock.data_wait_s],
            warmup_steps=clock.schedule.lead,
            window=list(clock.window_steps) if clock.window_steps else None,
            profiled_steps=self.profiler.active_steps,
            # Steps after the window are the mode measurements' own (unless the script goes on).
            measured_end=None if opts.full else opts.last_profiled_step,
            signal_switches=clock.switches,
            experiment_steps=clock.experiment_steps,
            own_steps=list(clock.own_steps),
            clock_errors=clock.errors,
            other_thread_steps=clock.other_thread_ticks,
            schedule=_schedule_record(clock, self.board),
            timed=self._timed_record(),
        )

    def _timed_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: w.to_dict() for k, w in self.timed.items()}
        if "kernels" in out and self.kernel_summary is not None:
            out["kernels"]["gpu"] = self.kernel_summary
        return out

    def record(self, outcome: dict[str, Any], script: str, argv: list[str]) -> dict[str, Any]:
        """Everything collected, as the versioned ``run.json`` document (without findings)."""
        import torch

        header = RunHeader(
            script=script,
            argv=argv,
            options=self.options.to_dict(),
            rank=RankPlace(self.rank.rank, self.rank.local_rank, self.rank.world_size),
            exit=outcome,
            started_unix_s=self.started_unix_s,
            torch_version=torch.__version__,
        )
        steps = self.step_times()
        sections = {
            "ops": self._op_summary(),
            "job": self.job,
            "compile": self.compile.snapshot(self.measure_start_unix_s, self.aside.compilations),
            "config": RunConfig(
                **self.config.snapshot(),
                **self.hooks.snapshot(),
                forward_steps=self.forward.snapshot(),
                checkpointing=self.checkpoints.snapshot(),
                housekeeping=self.housekeeping.snapshot(),
            ),
            "syncs": self.syncs.snapshot(),
            "cpu": self.cpu,
            "monitor": self.monitor.record(),
            "profiler": self._profiler_record(),
            "gpu": self._gpu_record(),
            "cuda_available": bool(torch.cuda.is_available()),
            **self._accounting_record(steps),
            **({"framework": self.framework} if self.framework else {}),
            "notes": guest.notes(),
        }
        return run_document(header, steps, sections)

    def _gpu_record(self) -> GpuInfo | None:
        """The ``gpu`` section: what the GPU probes read (None on a run that never used CUDA)."""
        got = self.gpu
        if not got:
            return None
        return GpuInfo(
            gpm=got.get("gpm"),
            nvml=got.get("nvml"),
            memory=got.get("memory") or {},
            device=got.get("device") or {},
        )

    def _profiler_record(self) -> dict[str, Any]:
        budget = getattr(self.profiler, "budget_record", None)  # a test's fake may lack it
        return {
            **(budget() if budget is not None else {}),
            "peak_growth_mib": round(self.monitor.peak_window_growth / 2**20, 1),
        }

    def _accounting_record(self, steps: StepStats) -> dict[str, Any]:
        gpu = None
        if self.gpu:
            gpu = {**self.gpu, "backend_flags": self.config.flags_at_window or {}}
        events: Any = None
        try:  # the exported trace when there is one (torch's events cost 15 kB an operator)
            trace = self.trace_file
            events = trace if trace is not None and trace.is_file() else self.profiler.events()
        except Exception as exc:
            guest.note("reading the profiler's events", exc)
        # The median step: one step slowed by a neighbour on a shared machine should not
        # move the efficiency of every other.
        return self.accounting.snapshot(events, steps.profiled_steps, steps.median_step_ms, gpu)

    def _op_summary(self) -> dict[str, Any] | None:
        try:
            if self.trace_file is None:
                return self.profiler.op_summary()
            return self.profiler.op_summary(self.trace_file)
        except Exception as exc:  # the summary is a bonus; the trace is still written
            return {"error": f"{type(exc).__name__}: {exc}"}
