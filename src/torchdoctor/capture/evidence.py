"""The run's evidence, written as it is gathered, so no ending of the script loses it.

``run.json`` is written when the script ends; a script that calls ``os._exit``, segfaults, or is
killed by SIGKILL never gets there. So from the first step on, the watched process appends one
line per event to ``steps.log`` in the run folder (``ranks/rank<R>.steps.log`` under torchrun),
straight to the kernel with ``os.write`` (a few microseconds a step, nothing buffered in the
process to lose). The watching parent (``commands/check/watcher.py``) rebuilds the record from it when
the script's process died before writing its own.

Lines: ``h {json}`` the header (script, argv, options, rank, versions); ``c SOURCE`` the step signal
(dataloader, optimizer, marker); ``s STEP_S WAIT_S RSS CUDA HEAP`` a step, with the process's
memory at its end in bytes (``capture/step_memory.py``; -1 unknown; older logs have none);
``r {json}`` the signal changed
and counting restarted; ``o`` the profiled window opened; ``e`` this process wrote its record;
``p`` it published the report.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from torchdoctor.capture.options import Schedule
from torchdoctor.capture.runfolder import RankInfo
from torchdoctor.capture.step_memory import StepMemory, steps_record
from torchdoctor.record import layout
from torchdoctor.record.run import StepStats
from torchdoctor.record.write import RankPlace, RunHeader, run_document


def evidence_path(folder: Path, rank: RankInfo) -> Path:
    """Where this process's evidence goes."""
    return layout.steps_log(folder, rank.rank, rank.distributed)


class EvidenceLog:
    """Appends evidence lines to one file; every failure to write is swallowed (a guest never
    breaks the script for its own bookkeeping)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pid = os.getpid()
        self._fd = -1
        self.memory = StepMemory()
        """Memory at each step's end: a leak shows even when the process is killed for it."""
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _write(self, line: str) -> None:
        # A forked child of the script inherits the descriptor: only the watched process writes.
        if self._fd >= 0 and os.getpid() == self.pid:
            with contextlib.suppress(OSError):
                os.write(self._fd, line.encode("utf-8", "replace"))

    def header(self, script: str, argv: list[str], options: dict[str, Any], rank: RankInfo) -> None:
        import sys

        torch = sys.modules.get("torch")
        self._write(
            "h "
            + json.dumps(
                {
                    "script": script,
                    "argv": argv,
                    "options": options,
                    "rank": {
                        "rank": rank.rank,
                        "local_rank": rank.local_rank,
                        "world_size": rank.world_size,
                    },
                    "pid": self.pid,
                    "started_unix_s": time.time(),
                    "torch_version": getattr(torch, "__version__", None),
                },
                default=str,
            )
            + "\n"
        )

    def step(self, step_s: float, wait_s: float) -> None:
        rss, cuda, heap = self.memory.sample()
        self._write(f"s {step_s!r} {wait_s!r} {rss} {cuda} {heap}\n")

    def restart(self, switch: str) -> None:
        self.memory.restart()
        self._write(f"r {json.dumps(switch)}\n")

    def source(self, name: str) -> None:
        self._write(f"c {name}\n")

    def window_opened(self) -> None:
        self._write("o\n")

    def record_written(self) -> None:
        self._write("e\n")

    def published(self) -> None:
        self._write("p\n")

    def close(self) -> None:
        self.memory.close()
        if self._fd >= 0 and os.getpid() == self.pid:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = -1


def read_evidence(path: Path) -> dict[str, Any]:
    """What a log holds: ``header``, ``step_s``, ``wait_s``, ``rss_bytes``, ``cuda_bytes``,
    ``heap_bytes`` (-1: unknown), ``switches``, ``window_opened``, ``record_written``, ``published`` (a
    missing or torn file reads as far as it goes)."""
    out: dict[str, Any] = {
        "header": {},
        "source": None,
        "step_s": [],
        "wait_s": [],
        "rss_bytes": [],
        "cuda_bytes": [],
        "heap_bytes": [],
        "switches": [],
        "window_opened": False,
        "record_written": False,
        "published": False,
    }
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    lines = text.splitlines()
    for i, line in enumerate(lines):
        # a line the process's end cut: its step time may stand, its last number may not
        cut = i == len(lines) - 1 and not text.endswith("\n")
        kind, _, rest = line.partition(" ")
        try:
            if kind == "s":
                step, wait, *memory = rest.split()
                step_s, wait_s = float(step), float(wait)
                known = [int(v) for v in memory] if not cut else []
                rss, cuda, heap = [*known, -1, -1, -1][:3]
                out["step_s"].append(step_s)
                out["wait_s"].append(wait_s)
                out["rss_bytes"].append(rss)
                out["cuda_bytes"].append(cuda)
                out["heap_bytes"].append(heap)
            elif kind == "h":
                out["header"] = json.loads(rest)
            elif kind == "r":  # a stronger step signal: what was counted measured something else
                out["switches"].append(json.loads(rest))
                out["step_s"], out["wait_s"], out["window_opened"] = [], [], False
                out["rss_bytes"], out["cuda_bytes"], out["heap_bytes"] = [], [], []
            elif kind == "c":
                out["source"] = rest.strip() or None
            elif kind == "o":
                out["window_opened"] = True
            elif kind == "e":
                out["record_written"] = True
            elif kind == "p":
                out["published"] = True
        except ValueError:
            continue  # the last line, cut by the process's end
    return out


def record_from_evidence(evidence: dict[str, Any], exit_info: dict[str, Any]) -> dict[str, Any]:
    """A ``run.json`` record from the evidence of a process that died before writing its own.

    Only what was written as it happened is known: the steps and their times. The trace, the
    operator summary, compile and configuration probes lived in the dead process.
    """
    h = evidence["header"]
    opts = h.get("options") or {}
    sched = Schedule.of(
        int(opts.get("warmup_steps") or 0),
        int(opts.get("clean_steps") or 0),
        int(opts.get("profile_steps") or 0),
    )
    warmup = sched.lead
    step_ms = [s * 1e3 for s in evidence["step_s"]]
    first, last = warmup + 1, min(len(step_ms), sched.last_profiled)
    header = RunHeader(
        script=h.get("script", "?"),
        argv=h.get("argv", []),
        options=opts,
        rank=RankPlace.from_dict(h.get("rank")),
        exit=exit_info,
        started_unix_s=h.get("started_unix_s"),
        torch_version=h.get("torch_version"),
    )
    steps = StepStats.measure(
        source=evidence["source"],
        step_ms=step_ms,
        data_wait_ms=[s * 1e3 for s in evidence["wait_s"]],
        warmup_steps=warmup,
        window=[first, last] if evidence["window_opened"] and last >= first else None,
        signal_switches=evidence["switches"],
        schedule=sched.to_dict(),
    )
    return run_document(
        header,
        steps,
        {
            "ops": None,
            "compile": {},
            "config": {},
            "syncs": {},
            "gpu": None,
            "cuda_available": None,
            "trace": None,
            "frameworks": [],
            "memory_steps": steps_record(
                evidence.get("rss_bytes") or [],
                evidence.get("cuda_bytes") or [],
                None,
                evidence.get("heap_bytes") or [],
            ),
            "from_evidence": True,
        },
    )
