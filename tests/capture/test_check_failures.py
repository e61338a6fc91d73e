"""How a watched script may end, and the loops ``check`` must count: every ending still
yields a report and the script's own exit status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.capture.check_helpers import FAST_STEPS, REPO, check_inprocess, check_subprocess

TRAIN = """
import sys, time, torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def train_step():
    loss = model(torch.randn(4, 8)).square().mean()
    opt.zero_grad(); loss.backward(); opt.step()
"""


def write(tmp_path: Path, body: str, name: str = "prog.py") -> Path:
    path = tmp_path / name
    path.write_text(TRAIN + textwrap.dedent(body))
    return path


def test_script_raising_keeps_its_traceback_and_status(tmp_path: Path) -> None:
    prog = write(tmp_path, "for i in range(4): train_step()\nraise RuntimeError('diverged')\n")
    r = check_inprocess(tmp_path / "runs", prog)
    assert r.code == 1
    assert "RuntimeError: diverged" in r.stderr and f'"{prog}", line' in r.stderr
    assert r.run["exit"]["status"] == "error" and r.run["steps"]["count"] == 4
    assert (r.folder / "report.txt").read_text().startswith("torchdoctor check")  # type: ignore[operator]


def test_sys_exit_status_is_passed_through(tmp_path: Path) -> None:
    prog = write(tmp_path, "for i in range(2): train_step()\nsys.exit(3)\n")
    r = check_inprocess(tmp_path / "runs", prog)
    assert r.code == 3 and r.run["exit"] == {
        "status": "exited",
        "code": 3,
        "phase": "run",
        "exception": "SystemExit: 3",
    }


def test_script_that_never_steps_gets_a_clear_message(tmp_path: Path) -> None:
    prog = write(tmp_path, "x = torch.randn(100, 100)\nfor _ in range(3): x = x @ x.T / 100\n")
    r = check_inprocess(tmp_path / "runs", prog)
    assert r.code == 0  # the script's own status, even with nothing measured
    assert "no step was seen" in r.stdout and "torchdoctor.step()" in r.stdout
    assert r.run["steps"]["count"] == 0 and r.run["trace"] is None


def test_script_args_pass_through_even_check_option_names(tmp_path: Path) -> None:
    seen = tmp_path / "argv.txt"
    prog = write(tmp_path, f"open({str(seen)!r}, 'w').write(' '.join(sys.argv[1:]))\n")
    r = check_inprocess(tmp_path / "runs", prog, "--lr", "3e-4", "--steps", "7", "--help")
    assert seen.read_text() == "--lr 3e-4 --steps 7 --help" and r.code == 0


def test_full_runs_to_the_end(tmp_path: Path) -> None:
    prog = write(tmp_path, "for i in range(12): train_step()\n")
    opts = ["--warmup", "2", "--clean-steps", "4", "--steps", "2", "--full"]
    r = check_inprocess(tmp_path / "runs", prog, opts=opts)
    assert r.code == 0 and r.run["steps"]["count"] == 12
    assert r.run["exit"]["status"] == "completed" and r.run["steps"]["profiled_steps"] == 2
    # clean 3-6, the profiler's own step 7, profiled 8-9, clean again 10-12 (the script ends)
    assert r.run["steps"]["window"] == [8, 9] and r.run["steps"]["clean"]["steps"] == 4


@pytest.mark.slow
def test_default_stops_after_the_window(tmp_path: Path) -> None:
    prog = write(tmp_path, "for i in range(1000): train_step()\nraise SystemExit(5)\n")
    r = check_inprocess(tmp_path / "runs", prog)
    assert (
        r.code == 0
        and r.run["exit"]["status"] == "stopped"
        and r.run["steps"]["count"] == FAST_STEPS
    )
    assert (r.folder / "trace.json.gz").stat().st_size > 0  # type: ignore[operator]


@pytest.mark.slow
def test_explicit_marker(tmp_path: Path) -> None:
    prog = write(
        tmp_path,
        "import torchdoctor\nfor i in range(50):\n"
        "    with torch.no_grad(): model(torch.randn(4, 8))\n    torchdoctor.step()\n",
    )
    r = check_inprocess(tmp_path / "runs", prog)
    assert (
        r.code == 0
        and r.run["steps"]["source"] == "marker"
        and r.run["steps"]["count"] == FAST_STEPS
    )


@pytest.mark.slow
def test_inference_loop_counts_batches_with_fork_workers(tmp_path: Path) -> None:
    prog = write(
        tmp_path,
        """
        from torch.utils.data import DataLoader, TensorDataset
        data = TensorDataset(torch.randn(512, 8))
        loader = DataLoader(data, batch_size=8, num_workers=2, multiprocessing_context="fork")
        with torch.no_grad():
            for (x,) in loader:
                model(x)
        """,
    )
    r = check_inprocess(tmp_path / "runs", prog)
    assert r.code == 0 and r.run["steps"]["source"] == "dataloader", r.stderr
    (dl,) = r.run["config"]["dataloaders"]
    assert dl["num_workers"] == 2 and dl["multiprocessing_context"] == "fork"


def test_out_of_memory_is_explained(tmp_path: Path) -> None:
    prog = write(
        tmp_path,
        "for i in range(3): train_step()\n"
        "raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB. '\n"
        "    'Of the allocated memory 70.00 GiB is allocated by PyTorch, and 3.00 GiB is '\n"
        "    'reserved by PyTorch but unallocated.')\n",
    )
    r = check_inprocess(tmp_path / "runs", prog)
    assert r.code == 1 and "OutOfMemoryError" in r.stderr
    assert r.top["id"] == "out-of-memory" and "3.00 GiB reserved but unused" in r.top["title"]


def test_missing_script_is_one_line(tmp_path: Path) -> None:
    r = check_inprocess(tmp_path, tmp_path / "nope.py")
    assert r.code == 2 and r.stderr.strip().count("\n") == 0 and "no such script" in r.stderr


@pytest.mark.slow
def test_spawn_workers_under_check(tmp_path: Path) -> None:
    prog = write(
        tmp_path,
        """
        from torch.utils.data import DataLoader, Dataset

        class Squares(Dataset):
            def __len__(self): return 256
            def __getitem__(self, i): return torch.full((8,), float(i))

        if __name__ == "__main__":
            loader = DataLoader(Squares(), batch_size=8, num_workers=1,
                                multiprocessing_context="spawn")
            for x in loader:
                loss = model(x).square().mean()
                opt.zero_grad(); loss.backward(); opt.step()
        """,
    )
    r = check_subprocess(tmp_path / "runs", prog)
    assert r.code == 0, r.stderr
    assert r.run["steps"]["source"] == "optimizer" and r.run["steps"]["count"] == FAST_STEPS
    assert r.run["config"]["dataloaders"][0]["multiprocessing_context"] == "spawn"


@pytest.mark.slow
def test_ctrl_c_still_reports(tmp_path: Path) -> None:
    prog = write(
        tmp_path,
        "for i in range(1000):\n    train_step(); time.sleep(0.1)\n"
        "    if i == 1: print('ready', flush=True)\n",
    )
    out = tmp_path / "runs"
    # a warm-up longer than the loop: only the signal can end this run
    cmd = [sys.executable, "-m", "torchdoctor", "check", "--warmup", "5000", "--out", str(out)]
    proc = subprocess.Popen(
        [*cmd, str(prog)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    try:
        stdout, stderr = proc.communicate(timeout=150)
    finally:
        proc.kill()
    # the watching parent ends by the script's signal once the report is out (130 in a shell)
    assert proc.returncode == -signal.SIGINT
    assert "KeyboardInterrupt" in stderr and str(prog) in stderr
    (folder,) = out.iterdir()
    assert (folder / "report.json").exists() and "interrupted" in stdout


def test_profiler_options_reach_the_trace_and_json_output(tmp_path: Path) -> None:
    import gzip
    import json

    prog = write(tmp_path, "for i in range(20): train_step()\n")
    opts = ["--warmup", "2", "--steps", "2", "--shapes", "--stack", "--memory", "--json"]
    r = check_inprocess(tmp_path / "runs", prog, opts=opts)
    assert r.code == 0
    assert json.loads(r.stdout)["findings"] == r.report["findings"]  # --json: the report only
    trace = json.loads(gzip.decompress((r.folder / "trace.json.gz").read_bytes()))  # type: ignore[operator]
    events = trace["traceEvents"]
    assert any(e.get("name") == "[memory]" for e in events)  # --memory
    assert any("Input Dims" in e.get("args", {}) for e in events)  # --shapes
    assert any(e.get("cat") == "python_function" for e in events)  # --stack
    assert r.run["options"]["record_shapes"] and r.run["options"]["profile_memory"]


@pytest.mark.slow
def test_script_with_its_own_profiler_still_gets_a_report(tmp_path: Path) -> None:
    prog = write(
        tmp_path,
        "with torch.profiler.profile():\n    for i in range(20): train_step()\n",
    )
    r = check_inprocess(tmp_path / "runs", prog)
    assert r.code == 0 and r.run["steps"]["count"] == FAST_STEPS
    # one profiling session per process: ours wins, or says why it could not run
    assert r.run["trace"] or "profiling problem" in r.stdout
