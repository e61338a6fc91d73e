"""``check`` never loses a run: hard exits, signals, timeouts, threads and forks of the script.

The cases run as real ``torchdoctor check`` processes (the console script, with its watching
parent), started together and waited for together, so the torch start-up of each overlaps.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import selected
from tests.hostile.limits import env

pytestmark = pytest.mark.slow

TRAIN = """
import os, signal, sys, threading, time, torch
torch.set_num_threads(1)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def step():
    loss = model(torch.randn(4, 8)).square().mean()
    opt.zero_grad(); loss.backward(); opt.step()
"""

# name -> (script body, check options, returncode, run.json exit status). A negative returncode
# is check's own process ended by that signal (once the report is out), as the script was.
CASES = {
    "os-exit": ("for i in range(20):\n    step()\n    if i == 3: os._exit(3)\n", [], 3, "lost"),
    "segfault": (
        "import ctypes\nfor i in range(20):\n    step()\n    if i == 3: ctypes.string_at(0)\n",
        [],
        -signal.SIGSEGV,
        "killed",
    ),
    "sigkill": (
        "for i in range(20):\n    step()\n    if i == 3: os.kill(os.getpid(), signal.SIGKILL)\n",
        [],
        -signal.SIGKILL,
        "killed",
    ),
    "sigterm": (
        "for i in range(20):\n    step()\n    if i == 3: os.kill(os.getpid(), signal.SIGTERM)\n",
        [],
        -signal.SIGTERM,
        "terminated",
    ),
    # Python itself ends by SIGINT after an uncaught KeyboardInterrupt.
    "sigint": (
        "for i in range(20):\n    step()\n    if i == 3: os.kill(os.getpid(), signal.SIGINT)\n",
        [],
        -signal.SIGINT,
        "interrupted",
    ),
    # Long enough for torch to import and four steps to run on a busy machine. After its four
    # steps each timed script leaves a file (READY) and sleeps: the other cases start then, and
    # the module's other tests run while the timed scripts wait out their timeouts.
    "timeout": (
        "for i in range(4): step()\nopen(READY, 'w').close()\ntime.sleep(600)\n",
        ["--timeout", "25"],
        124,
        "timeout",
    ),
    "stuck-past-timeout": (
        "for i in range(4): step()\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})\n"
        "open(READY, 'w').close()\n"
        "time.sleep(600)\n",
        ["--timeout", "15"],
        124,
        "timeout",
    ),
}


@dataclass
class Case:
    proc: subprocess.Popen[str]
    out: Path
    started: float


def _start(tmp: Path, name: str, body: str, opts: list[str]) -> Case:
    script = tmp / f"{name}.py"
    script.write_text(TRAIN + f"READY = {str(_ready(tmp, name))!r}\n" + textwrap.dedent(body))
    out = tmp / f"runs-{name}"
    cmd = [sys.executable, "-m", "torchdoctor", "check", "--full", *opts, "--out", str(out)]
    proc = subprocess.Popen(
        [*cmd, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(OMP_NUM_THREADS="1"),
        cwd=tmp,  # a core dump of the script's own crash lands here, never in the repository
    )
    return Case(proc, out, time.monotonic())


def _ready(tmp: Path, name: str) -> Path:
    return tmp / f"ready-{name}"


def _run_folder(out: Path) -> Path:
    folders = [p for p in out.iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    return folders[0]


ENDINGS_TEST = "test_every_ending_reports_the_steps_measured"


@pytest.fixture(scope="module", autouse=True)
def endings(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Case] | None]:
    """The endings test's cases, started before this module's first test: the timed ones first
    and alone, so their four steps come in the script's own time; then the others. They sleep
    out their timeouts (15 s and its 15 s grace: most of that test's time) while the module's
    other tests run, and the endings test, last in the module, collects them."""
    if not selected(request.session, __name__, ENDINGS_TEST):
        yield None
        return
    tmp = tmp_path_factory.mktemp("endings")
    timed = {n: c for n, c in CASES.items() if "--timeout" in c[1]}
    cases = _start_all(tmp, timed)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and any(
        not _ready(tmp, n).exists() and c.proc.poll() is None for n, c in cases.items()
    ):
        time.sleep(0.2)
    cases |= _start_all(tmp, {n: c for n, c in CASES.items() if n not in timed})
    yield cases
    for case in cases.values():
        if case.proc.poll() is None:
            case.proc.kill()
            case.proc.communicate()


def _start_all(
    tmp_path: Path, batch: dict[str, tuple[str, list[str], int, str]]
) -> dict[str, Case]:
    return {n: _start(tmp_path, n, body, opts) for n, (body, opts, _, _) in batch.items()}


def _check_all(cases: dict[str, Case]) -> None:
    for name, case in cases.items():
        _, _, status, ending = CASES[name]
        try:
            stdout, stderr = case.proc.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            case.proc.kill()
            raise AssertionError(f"{name}: check did not end") from None
        assert case.proc.returncode == status, (name, stderr[-1500:])
        assert "Traceback" not in stderr or name in ("segfault", "sigint"), (name, stderr[-1500:])
        folder = _run_folder(case.out)
        run = json.loads((folder / "run.json").read_text())
        assert run["exit"]["status"] == ending, (name, run["exit"])
        assert run["steps"]["count"] >= 4, (name, run["steps"])
        report = (folder / "report.txt").read_text()
        assert "not a clean bill of health" in report, (name, report[:800])
        assert report in stdout or report.strip() in stdout, name
        if status < 0:  # the report and the last line say which signal, and the shell's status
            sig = signal.Signals(-status)
            said = f"killed by {sig.name}" if ending == "killed" else ending
            assert f"(exit: {said}, code {128 + sig})" in report, (name, report[:300])
            assert f"check ends by {sig.name} too (status {128 + sig}" in stderr, name


def test_threads_stepping_optimizers_are_not_profiled_from_a_thread(tmp_path: Path) -> None:
    """Before: check's StopScript traceback from a worker thread, and often a segfault (the
    profiler started from a thread other than the one its client registered in)."""
    body = """
    def worker():  # four threads step one shared optimizer (Hogwild-style)
        for _ in range(30):
            loss = model(torch.randn(4, 8)).square().mean(); loss.backward(); opt.step()
    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
    print("all threads done")
    """
    case = _start(tmp_path, "threads", body, [])
    stdout, stderr = case.proc.communicate(timeout=150)
    assert case.proc.returncode == 0, stderr[-1500:]
    assert "Traceback" not in stderr and "registerClient" not in stderr, stderr[-1500:]
    assert "all threads done" in stdout  # no thread of the script was killed
    run = json.loads((_run_folder(case.out) / "run.json").read_text())
    assert run["steps"]["count"] == 30  # one thread's steps, not four threads' interleaved
    assert run["steps"]["other_thread_steps"] >= 80  # counted apart (a racy += may drop one)


def test_a_forked_child_never_writes_the_run_folder(tmp_path: Path) -> None:
    """Before: parent and child both wrote the run folder (a corrupt trace.json.gz). The fork
    comes before the profiled window in one run and inside it in the other."""
    body = """
    for _ in range(2): step()
    pid = os.fork()
    if pid == 0:
        for _ in range(30): step()
        print("child done", flush=True)
        sys.exit(0)
    os.waitpid(pid, 0)
    for _ in range(30): step()
    """
    # no clean window: the fork lands before the profiler in one run and inside it in the other
    before = _start(
        tmp_path, "before", body, ["--warmup", "5", "--clean-steps", "0", "--steps", "3"]
    )
    inside = _start(
        tmp_path, "inside", body, ["--warmup", "2", "--clean-steps", "0", "--steps", "3"]
    )
    for case in (before, inside):
        stdout, stderr = case.proc.communicate(timeout=150)
        assert case.proc.returncode == 0, stderr[-1500:]
        assert stdout.count("torchdoctor check:") == 1 and "child done" in stdout
        run = json.loads((_run_folder(case.out) / "run.json").read_text())
        assert run["steps"]["count"] == 32
    with gzip.open(_run_folder(before.out) / "trace.json.gz") as fh:  # one writer, whole
        assert json.load(fh)["traceEvents"]
    run = json.loads((_run_folder(inside.out) / "run.json").read_text())
    assert any("forked while the profiler recorded" in e for e in run["steps"]["clock_errors"])


def test_an_unwritable_html_path_fails_before_the_script_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "s.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchdoctor",
            "check",
            "--html",
            str(tmp_path / "no" / "x.html"),
            "--out",
            str(tmp_path / "runs"),
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env(),
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().startswith("torchdoctor: error: cannot write the HTML report")
    assert len(proc.stderr.strip().splitlines()) == 1 and not marker.exists()


def test_the_script_name_reaches_the_terminal_inert(tmp_path: Path) -> None:
    name = "x\x1b]0;owned\x07\x1b[2J"
    script = tmp_path / f"{name}.py"
    script.write_text(TRAIN + "for _ in range(8): step()\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchdoctor",
            "check",
            "--warmup",
            "1",
            "--steps",
            "2",
            "--out",
            str(tmp_path / "runs"),
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env(),
    )
    assert proc.returncode == 0, proc.stderr[-1000:]
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert "\\x1b]0;owned" in proc.stdout
    folder = _run_folder(tmp_path / "runs")
    assert json.loads((folder / "run.json").read_text())["script"] == str(script)


def test_evidence_is_written_as_gathered(tmp_path: Path) -> None:
    """steps.log has each step when it ends: kill -9 the whole process group mid-run (the
    watching parent too) and the steps are still there to read."""
    from torchdoctor.capture.evidence import read_evidence

    script = tmp_path / "slow.py"
    script.write_text(TRAIN + "for _ in range(1000):\n    step(); time.sleep(0.05)\n")
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchdoctor", "check", "--full", "--out", str(out), str(script)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env(),
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    log = None
    while time.monotonic() < deadline:
        logs = list(out.glob("*/steps.log")) if out.exists() else []
        if logs and len(read_evidence(logs[0])["step_s"]) >= 5:
            log = logs[0]
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert log is not None, "no steps logged"
    evidence = read_evidence(log)
    assert len(evidence["step_s"]) >= 5 and evidence["header"]["script"] == str(script)
    assert not evidence["record_written"]


def test_every_ending_reports_the_steps_measured(endings: dict[str, Case] | None) -> None:
    """Before: os._exit, a segfault, SIGKILL and SIGTERM left an empty run folder, and a script
    that never finished its window made check wait forever. Then check exited 128 + N after a
    signal N: a supervisor (torchrun's agent, Slurm, a CI runner) saw an exit status where the
    script had died by a signal; now check's process ends by the same signal. The cases
    started before the module's first test (``endings``)."""
    assert endings is not None
    _check_all(endings)
