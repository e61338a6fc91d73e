"""Run a script in-process as ``__main__`` under watch, then write its run folder.

The script gets its own ``sys.argv`` and ``sys.path[0]``, exactly as ``python SCRIPT ARGS``
would give it. Whatever way it ends (returning, ``sys.exit``, an exception, Ctrl-C, or our own
stop after the profiled steps) a record is written, the script's own traceback is shown, and
its exit status is returned.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import runpy
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from torchdoctor.capture.clock import StopScript
from torchdoctor.capture.evidence import EvidenceLog, evidence_path
from torchdoctor.capture.experiments import host_for
from torchdoctor.capture.options import CheckOptions
from torchdoctor.capture.runfolder import (
    RankInfo,
    create_run_folder,
    rank_result_path,
    trace_path,
    write_json,
)
from torchdoctor.capture.stopping import StopSignals, on_fork
from torchdoctor.capture.streams import stdout_to_stderr
from torchdoctor.record.write import RunEnd, ended_document

EXIT_INTERRUPTED = 130  # what a shell reports for a process ended by SIGINT


@dataclass
class Outcome:
    """How the script ended."""

    status: str
    """completed | stopped (by check, after the profiled steps) | exited | error | interrupted
    | terminated (SIGTERM) | timeout (--timeout); a watching parent adds killed (by a signal)
    and lost (the process ended before writing its record)"""
    code: int
    """The exit status the script would have had on its own."""
    exception: BaseException | None = None
    phase: str = "run"
    """``parse``: the script's own source did not compile (nothing of it ran); ``run``: it
    ran (a SyntaxError raised by ``ast.literal_eval`` or ``eval`` at run time is a crash)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``run.json``: status, exit code, phase and the exception as one line."""
        exc = self.exception
        return {
            "status": self.status,
            "code": self.code,
            "phase": self.phase,
            "exception": None if exc is None else f"{type(exc).__name__}: {exc}"[:2000],
        }


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message") prints the message and exits 1
    return 1


def _script_frames(tb: TracebackType | None) -> TracebackType | None:
    # Drop runpy's and our own frames so the user sees the traceback python would show.
    ours = (runpy.__file__, "<frozen runpy>", __file__)
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    return tb


def internal_error(when: str, exc: BaseException) -> None:
    """Report a torchdoctor bug in one line on standard error."""
    print(
        f"torchdoctor: internal error {when}: {type(exc).__name__}: {exc} "
        "(set TORCHDOCTOR_DEBUG=1 for the traceback)",
        file=sys.stderr,
    )


def show_traceback(exc: BaseException) -> None:
    """Print the script's traceback to standard error, without torchdoctor's frames."""
    tb = _script_frames(exc.__traceback__)
    traceback.print_exception(type(exc), exc, tb, file=sys.stderr)


def run_script(script: str, args: list[str], stop: StopSignals | None = None) -> Outcome:
    """Execute ``script`` as ``__main__`` with ``args``; never raises for the script's sake."""
    saved_argv, saved_path0 = sys.argv[:], sys.path[:]
    # As python (3.9+) does: argv[0] as given, but __file__ and the code's file names absolute,
    # resolved now. A script that changes its working directory (Hydra's job.chdir) must still
    # have its lines found: a relative name would be resolved against the new folder later.
    path = os.path.abspath(script)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(path))
    try:
        parsed = _parse_error(path)
        if parsed is not None:
            return parsed
        return run_function(lambda: runpy.run_path(path, run_name="__main__"), stop)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path0


def _parse_error(script: str) -> Outcome | None:
    """The script's source compiled as runpy would: an Outcome for a SyntaxError (shown as
    python shows it), None when it compiles. Nothing of the script runs here."""
    import tokenize

    try:
        with tokenize.open(script) as f:
            compile(f.read(), script, "exec", dont_inherit=True)
    except SyntaxError as exc:
        traceback.print_exception(type(exc), exc, None, file=sys.stderr)
        return Outcome("error", 1, exc, phase="parse")
    except (OSError, ValueError):  # unreadable or odd bytes: runpy says what is wrong
        return None
    return None


def run_function(main: Callable[[], Any], stop: StopSignals | None = None) -> Outcome:
    """Call ``main`` and say how it ended; never raises for its sake."""
    try:
        main()
        return Outcome("completed", 0)
    except StopScript:
        return Outcome("stopped", 0)
    except SystemExit as exc:
        code = _exit_code(exc)
        return Outcome("completed" if code == 0 else "exited", code, exc if code else None)
    except KeyboardInterrupt as exc:
        status, code = (stop or StopSignals(None)).outcome(exc)
        if status == "interrupted":
            show_traceback(exc)
        else:
            why = "SIGTERM" if status == "terminated" else "--timeout"
            print(f"torchdoctor: stopped the script ({why})", file=sys.stderr)
        return Outcome(status, code, exc)
    except BaseException as exc:
        show_traceback(exc)
        return Outcome("error", 1, exc)


def check_script(
    script: str, args: list[str], options: CheckOptions, quiet_stdout: bool = False
) -> tuple[int, Path, dict[str, Any]]:
    """Run ``script`` under watch and write this rank's results.

    ``quiet_stdout`` sends the script's standard output to standard error (``check --json``).
    Returns the script's exit status, the run folder and this rank's record (``run.json``).
    """
    from torchdoctor.inputs import input_path

    input_path(script, "script")  # a FIFO would block runpy
    return _watch(script, args, options, lambda stop: run_script(script, args, stop), quiet_stdout)


def check_callable(
    main: Callable[[], Any], options: CheckOptions
) -> tuple[int, Path, dict[str, Any]]:
    """``check_script`` for a function called with no arguments (notebooks)."""
    name = re.sub(r"\W+", "_", getattr(main, "__qualname__", "") or "").strip("_") or "function"
    return _watch(f"{name}.py", [], options, lambda stop: run_function(main, stop))


PRESET_FOLDER: Path | None = None
"""The run folder, when a watching parent made it before forking this process."""


def _watch(
    script: str,
    args: list[str],
    options: CheckOptions,
    run: Callable[[StopSignals], Outcome],
    quiet_stdout: bool = False,
) -> tuple[int, Path, dict[str, Any]]:
    rank = RankInfo.from_env()
    folder = PRESET_FOLDER or create_run_folder(options.out_dir, script, rank)
    from torchdoctor.capture.frameworks import FrameworkSpy
    from torchdoctor.capture.session import Session

    session = Session(options, folder, rank)
    log = EvidenceLog(evidence_path(folder, rank))
    log.header(script, args, options.to_dict(), rank)
    session.clock.log = log
    spy = FrameworkSpy()  # which framework's trainer steps the optimizer, for the hint
    session.accounting.experiment_host = host_for(
        session.clock, lambda: _record_before_experiments(session, script, args, spy, log)
    )
    stop = StopSignals(options.timeout_s, watched=PRESET_FOLDER is not None)
    pid = os.getpid()
    # A fork stops a recording profiler first; a forked child never counts steps.
    forget_fork = on_fork(session.clock.before_fork, session.clock.quiet)
    try:
        session.install()
        spy.install()
    except Exception as exc:  # our bug: the script still runs, unwatched
        if os.environ.get("TORCHDOCTOR_DEBUG"):
            raise
        internal_error("while installing the hooks (the script runs unwatched)", exc)
        _safely(spy.uninstall)
        _safely(session.uninstall)
    stop.install()
    try:
        with stdout_to_stderr() if quiet_stdout else contextlib.nullcontext():
            outcome = run(stop)
    finally:
        if os.getpid() == pid:
            _safely(stop.uninstall)
            _safely(spy.uninstall)
            _safely(session.uninstall)
            forget_fork()
    if os.getpid() != pid:
        _leave_forked_child(outcome.code)
    try:
        # A framework callback that stepped aside for us is in use: no hint to add it.
        frameworks = [] if session.framework else spy.seen
        record = {**finish_record(session, outcome, script, args), "frameworks": frameworks}
    except Exception as exc:
        # Our bug must not replace the script's exit status; say so in one line.
        if os.environ.get("TORCHDOCTOR_DEBUG"):
            raise
        internal_error("while collecting the results", exc)
        record = {"exit": outcome.to_dict(), "steps": {}, "findings": [], "error": repr(exc)}
    write_json(rank_result_path(folder, rank), record)
    log.record_written()
    log.close()
    _close_process_group()
    return outcome.code, folder, record


def _record_before_experiments(
    session: Any, script: str, args: list[str], spy: Any, log: EvidenceLog
) -> None:
    """Check's extra steps (``capture/experiments.py``) are about to run: write the record as
    it stands, so that no ending of theirs (``--timeout``, a signal, a crash) loses the report;
    it is written again when they end. What compiles from now on is check's own."""
    import time

    session.compile.ours_from(time.time())
    record = {
        **finish_record(session, Outcome("stopped", 0), script, args),
        "frameworks": [] if session.framework else spy.seen,
        "written_before_experiments": True,
    }
    write_json(rank_result_path(session.folder, session.rank), record)
    log.record_written()


def _leave_forked_child(code: int) -> None:
    """A child the script forked came back from the script: it is not the watched run and must
    not write the run folder. It ends with its own status, its atexit handlers run and its
    output flushed, but without the interpreter's full teardown: in a fork of a process that
    ran torch's profiler, that teardown hangs on a lock of a profiler thread the fork did not
    copy (plain torch does the same)."""
    import atexit

    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _safely(step: Callable[[], Any]) -> None:
    try:
        step()
    except Exception as exc:
        internal_error("while removing the hooks", exc)


def finish_record(session: Any, outcome: Outcome, script: str, args: list[str]) -> dict[str, Any]:
    """Export the trace, collect OOM evidence, and attach run-level findings to the record.

    The record is built from parts (``record/write.py``'s ``ended_document``), never changed
    in place: what the session recorded is left as it is."""
    from torchdoctor.capture import gpu_probe
    from torchdoctor.capture.own_frames import scrub
    from torchdoctor.record.run import RunRecord
    from torchdoctor.rules.run_rules import run_findings

    for probe in (_probe_threads, _probe_loader):  # extra evidence: never worth the report
        _optional(probe, session)
    # Exported once: a record written before check's extra steps exported it already.
    exported = session.trace_file or session.profiler.export(
        trace_path(session.folder, session.rank)
    )
    session.trace_file = exported
    recorded = scrub(session.record(outcome.to_dict(), script, args))
    gpu = RunRecord.from_dict(recorded).gpu
    trace = None if exported is None else str(exported.relative_to(session.folder))
    oom: dict[str, Any] | None = None
    observer: dict[str, Any] | None = None
    exc = outcome.exception
    watch = session.oom_watch
    if exc is not None and gpu_probe.is_oom(exc):
        oom = _oom(exc, session)
        if oom.get("snapshot_file"):  # explain it now: who held the memory, fragmentation
            from torchdoctor.memory.headline import snapshot_headline

            analysis = snapshot_headline(session.folder / oom["snapshot_file"])
            oom = {**oom, "memory_analysis": analysis}
    elif watch is not None and watch.count and gpu is not None:
        # OOMs the script caught itself (a retry, a batch-size search): evidence, not a crash.
        observer = watch.record()
    end = RunEnd(trace, oom, observer)
    measured: list[dict[str, Any]] = []  # kept even when the snapshot after it failed

    def memory_steps(s: Any) -> None:
        if not (oom or {}).get("snapshot_file"):  # never over the OOM's snapshot
            _memory_steps(s, recorded, end, measured)

    _optional(memory_steps, session)
    if measured:
        end = replace(end, memory_steps=measured[-1])
    session.stop_memory_history()
    outcome.exception = None  # drop the traceback: it keeps DataLoader workers alive
    record = ended_document(recorded, end)
    return ended_document(recorded, end, [f.to_dict() for f in run_findings(record)])


def _memory_steps(
    session: Any, recorded: dict[str, Any], end: RunEnd, measured: list[dict[str, Any]]
) -> None:
    """Memory at each step's end (``capture/step_memory.py``); when the device's grows like a
    leak and ``--memory`` recorded the allocator's history, the snapshot says who allocated
    what is still held (``memory_steps.snapshot``). Each stage of the section is appended to
    ``measured`` as it is built, so that a failing snapshot keeps the steps before it; the
    last is the section. ``recorded`` and ``end``: the run so far, left as they are."""
    from torchdoctor.record.run import RunRecord

    memory = getattr(getattr(session.clock, "log", None), "memory", None)
    if memory is None:
        return
    gpu = RunRecord.from_dict(recorded).gpu
    total = None if gpu is None else gpu.memory.get("total_bytes")
    steps = {**memory.record(), "device_total_bytes": total}
    measured.append(steps)
    if not session.memory_history:
        return
    from torchdoctor.rules.families.memory_growth import leaking_fits

    with_steps = ended_document(recorded, replace(end, memory_steps=steps))
    if any(f.kind == "device" for f in leaking_fits(with_steps)):
        import torch

        from torchdoctor.capture import gpu_probe
        from torchdoctor.memory.headline import snapshot_headline

        path = session.folder / session.snapshot_file
        gpu_probe.write_snapshot(torch.cuda, path)
        measured.append({**steps, "snapshot_file": path.name})
        measured.append({**measured[-1], "snapshot": snapshot_headline(path)})


def _probe_threads(session: Any) -> None:
    """Each step's wait of the intra-op threads for a core that its own thread did not block
    on (``clock.threads_wait_s``, ms, as ``steps.step_ms``); and when the window's counters say
    more threads ran than there were free cores, measure what that costs now: the same small
    work with the script's thread count and with fewer, interleaved
    (``cpu_usage.thread_probe``). The script's steps are over by now."""
    from torchdoctor.capture.cpu_usage import thread_probe
    from torchdoctor.rules.cpu_rules import cpu_demand

    cpu: Any = getattr(session, "cpu", None)
    waits = getattr(getattr(session, "clock", None), "threads_wait_s", None)
    if isinstance(cpu, dict) and waits is not None:
        cpu["step_threads_wait_ms"] = [None if math.isnan(w) else round(w * 1e3, 3) for w in waits]
    d = cpu_demand(cpu) if isinstance(cpu, dict) else None
    if d is None or not d.oversubscribed or "thread_probe" in cpu:  # probed once per run
        return
    # torch's own setter: a record written before check's extra steps probes with the
    # session's wrappers still installed, and the probe's calls are not the script's.
    modes = getattr(getattr(session, "accounting", None), "modes", None)
    setter = getattr(modes, "originals", {}).get("set_num_threads")
    try:
        cpu["thread_probe"] = thread_probe(d.threads, d.suggested_threads, set_threads=setter)
    except Exception as exc:  # a measurement of ours: never the script's problem
        cpu["thread_probe"] = {"error": f"{type(exc).__name__}: {exc}"}


def _probe_loader(session: Any) -> None:
    """Time a batch of the loader that kept the measured steps waiting longest, made in this
    process (``loader_probe``), when that wait was worth a finding; else of a loader with more
    workers than CPUs (torch warns of those: the probe says whether its items wait, where
    workers beyond the cores are right)."""
    from torchdoctor.capture.loader_probe import time_batches
    from torchdoctor.rules.thresholds import DATA_WAIT_MIN_MS

    hooks = session.hooks
    measured = max(1, len(session.clock.step_s) - session.clock.schedule.lead)
    waits = {k: u["measured_wait_s"] for k, u in hooks.usage.items() if u["measured_wait_s"] > 0}
    key = max(waits, key=waits.__getitem__) if waits else None
    if key is None or waits[key] * 1e3 / measured < DATA_WAIT_MIN_MS:
        cpus = os.cpu_count() or 1
        many = [k for k, p in hooks.loader_parts.items() if getattr(p, "num_workers", 0) > cpus]
        key = many[0] if many and many[0] in hooks.usage else None
    loader = hooks.loader_parts.pop(key, None) if key is not None else None
    hooks.loader_parts.clear()  # release the datasets
    if loader is None:
        return
    try:
        probe = time_batches(loader)
    except Exception as exc:  # the dataset's own error: say so, never raise
        probe = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    if probe is not None:
        hooks.usage[key]["main_process_batch"] = probe


def _optional(probe: Callable[[Any], None], session: Any) -> None:
    """Run one of the probes after the steps; its error becomes a note, never the report's."""
    try:
        probe(session)
    except Exception as exc:
        with contextlib.suppress(Exception):
            name = probe.__name__.lstrip("_").replace("_", " ")
            session.clock.errors.append(f"{name} failed: {type(exc).__name__}: {exc}"[:300])


def _oom(exc: BaseException, session: Any) -> dict[str, Any]:
    import torch

    from torchdoctor.capture import gpu_probe

    if not (torch.cuda.is_initialized() and torch.cuda.is_available()):
        return {"message": str(exc).splitlines()[0][:500], **gpu_probe.parse_oom_message(str(exc))}
    return gpu_probe.oom_record(
        torch.cuda,
        exc,
        session.folder,
        snapshot_file=session.snapshot_file,
        observed=session.oom_watch,
    )


def _close_process_group() -> None:
    # A script stopped after its profiled steps never reaches its own destroy_process_group().
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass
