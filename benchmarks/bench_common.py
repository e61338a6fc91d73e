"""What the analyse-speed benchmarks share: running a command as a child process and measuring it,
finding (or installing) Holistic Trace Analysis, and printing tables.

Every measurement is a whole process (interpreter start, imports, work, exit), timed by the parent
with a monotonic clock; its peak resident memory comes from ``os.wait4`` for that child alone.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("TORCHDOCTOR_TRACES", REPO.parent / "shared" / "traces"))
HTA_VENV = REPO / "benchmarks" / ".hta-venv"
RESULT_TAG = "BENCH_RESULT "

# HTA in its own process: load the one-trace folder, then the temporal breakdown (the pair the
# issue compares against). Percentages come back on the last line, after HTA's own logging.
HTA_SCRIPT = """
import json, sys
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
df = analyzer.get_temporal_breakdown(visualize=False)
row = df.iloc[0]
print("BENCH_RESULT " + json.dumps({
    "idle_pct": float(row["idle_time_pctg"]),
    "compute_pct": float(row["compute_time_pctg"]),
    "non_compute_pct": float(row["non_compute_time_pctg"]),
}))
"""

# The loader alone (load + step detection), for the "without full analysis" column.
LOAD_SCRIPT = """
import sys
from torchdoctor.trace.load import load_trace
from torchdoctor.trace.steps import find_steps
table = load_trace(sys.argv[1])
print("BENCH_RESULT", len(table), len(find_steps(table)))
"""


@dataclass
class Run:
    """One child process: wall seconds, CPU seconds (user + system, its children included),
    peak RSS in MiB, exit status, what it printed."""

    wall_s: float
    cpu_s: float
    peak_mib: float
    status: int
    stdout: str
    stderr: str


def run_child(cmd: list[str], timeout_s: float, preexec: Callable[[], None] | None = None) -> Run:
    """Run ``cmd`` to completion (killed after ``timeout_s``); measure wall time and peak RSS.

    ``preexec`` runs in the child before ``cmd`` (to set resource limits).
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, preexec_fn=preexec)
        status, usage = _wait(proc, timeout_s)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        cpu = usage.ru_utime + usage.ru_stime
        peak = usage.ru_maxrss / 1024
        return Run(wall, cpu, peak, status, out.read().decode(), err.read().decode())


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> tuple[int, Any]:
    """(exit status, resource usage) of the child; status -9 when it ran past ``timeout_s``."""
    # A blocking wait4 returns the moment the child exits (no polling delay in the timing);
    # a timer kills it if it runs past the limit.
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage


def result_line(text: str) -> Any:
    """The JSON after the last ``BENCH_RESULT`` tag in a child's output, or None."""
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT_TAG):
            try:
                return json.loads(line[len(RESULT_TAG) :])
            except json.JSONDecodeError:
                return line[len(RESULT_TAG) :]
    return None


def hta_python(explicit: str | None) -> str | None:
    """An interpreter that can import HTA: the argument, $HTA_PYTHON, this one, or a new venv."""
    for candidate in (explicit, os.environ.get("HTA_PYTHON")):
        if candidate:
            return candidate
    if _can_import_hta(sys.executable):
        return sys.executable
    python = HTA_VENV / "bin" / "python"
    if python.exists() and _can_import_hta(str(python)):
        return str(python)
    print(f"installing holistictraceanalysis into {HTA_VENV} (once; about 30 s) ...", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(HTA_VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "holistictraceanalysis"]
        subprocess.run(pip, check=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"could not install HTA ({exc}); measuring torchdoctor alone", flush=True)
        return None
    return str(python)


def _can_import_hta(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import hta.trace_analysis"], capture_output=True)
    return probe.returncode == 0


def torchdoctor_cmd(src: Path | None = None) -> list[str]:
    """The installed console script, run exactly as a user would, on the bytecode-compiled copy
    of ``src`` (this checkout's ``src/`` by default) that ``compile_bytecode`` made."""
    script = Path(sys.executable).with_name("torchdoctor")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "torchdoctor"]
    copy = _STAGED.get((src or REPO / "src").resolve())
    return ["env", f"PYTHONPATH={copy}", *cmd] if copy is not None else cmd


@dataclass
class Series:
    """Repeated runs of one tool on one trace."""

    runs: list[Run] = field(default_factory=list)

    @property
    def ok(self) -> list[Run]:
        return [r for r in self.runs if r.status == 0]

    def median_wall(self) -> float | None:
        ok = self.ok
        return statistics.median(r.wall_s for r in ok) if ok else None

    def spread(self) -> str:
        """Min-max of the wall times, to show how noisy the machine was."""
        ok = self.ok
        return f"{min(r.wall_s for r in ok):.2f}-{max(r.wall_s for r in ok):.2f}" if ok else "-"

    def median_cpu(self) -> float | None:
        ok = self.ok
        return statistics.median(r.cpu_s for r in ok) if ok else None

    def median_peak(self) -> float | None:
        ok = self.ok
        return statistics.median(r.peak_mib for r in ok) if ok else None

    def failure(self) -> str:
        """Why the runs failed (timeout or the error's last line)."""
        bad = [r for r in self.runs if r.status != 0]
        if not bad:
            return ""
        if bad[0].status == -9:
            return "timed out"
        lines = bad[0].stderr.strip().splitlines()
        return lines[-1][:60] if lines else f"exit {bad[0].status}"


def fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.1f}x"


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    for line in (header, ["-" * w for w in widths], *rows):
        print("  ".join(str(c).rjust(w) for c, w in zip(line, widths, strict=True)))


_STAGED: dict[Path, Path] = {}


def python_cmd(src: Path | None = None) -> list[str]:
    """This interpreter, importing torchdoctor from the compiled copy of ``src`` (see above)."""
    copy = _STAGED.get((src or REPO / "src").resolve())
    return ["env", f"PYTHONPATH={copy}", sys.executable] if copy is not None else [sys.executable]


def compile_bytecode(*src_dirs: Path) -> str:
    """Copy torchdoctor's sources (and any other ``src`` folders measured) into a temporary
    folder and compile them to bytecode there; ``torchdoctor_cmd`` runs those copies.

    Every other package in these measurements (HTA, numpy, pandas, click) was installed by pip,
    which compiles bytecode at install time, as it would for a torchdoctor wheel. An editable
    install run with PYTHONDONTWRITEBYTECODE=1 (set on some machines) would otherwise compile
    all of torchdoctor's modules from source in every process, which measured 10-15% of an
    ``analyze`` process. The checkout itself is never written to (the copies go when this
    process exits). Returns a line for the output saying it was done.
    """
    import atexit
    import compileall
    import shutil

    tmp = Path(tempfile.mkdtemp(prefix="td-bench-src-"))
    atexit.register(shutil.rmtree, tmp, True)
    ok = True
    for i, src in enumerate([REPO / "src", *src_dirs]):
        copy = tmp / f"src{i}"
        shutil.copytree(src, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        ok = compileall.compile_dir(str(copy), quiet=1) and ok
        _STAGED[src.resolve()] = copy
    names = ", ".join(f"{s} -> {c}" for s, c in _STAGED.items())
    return f"bytecode compiled in temporary copies: {names}" + ("" if ok else " (failed)")


def environment() -> str:
    """One line saying what was measured with: CPUs, Python, numpy and msgspec versions."""
    # Asked of a child, so this process stays small: a child's peak RSS counts the parent's
    # pages it was forked with, before it exec'd.
    probe = "import msgspec, numpy; print(numpy.__version__, msgspec.__version__)"
    versions = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    numpy_v, msgspec_v = [*versions.stdout.split(), "?", "?"][:2]
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{cpus} CPUs, Python {sys.version.split()[0]}, numpy {numpy_v}, msgspec {msgspec_v}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
