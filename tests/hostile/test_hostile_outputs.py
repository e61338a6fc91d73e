"""An output that cannot be written is the user's environment, not a torchdoctor bug.

Before: ``torchdoctor analyze TRACE > /dev/full`` printed "internal error: OSError: [Errno 28] No
space left on device" and exited 3 (the status CI reads as a torchdoctor crash); a ``--json``
or ``--html`` file on a full disk exited 2 (bad input). Now every command says in one line
which output failed (standard output, or the file) and exits 74 (``EX_IOERR``).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.synth import annotation, cpu_op, launched, write_trace
from tests.hostile.snapshots import snapshot

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")

FULL = "/dev/full"
EXIT_OUTPUT = 74
ON_STDOUT = "torchdoctor: error: cannot write to standard output: No space left on device\n"


def _trace(tmp: Path) -> Path:
    events = [
        annotation("ProfilerStep#1", 0, 1000),
        annotation("ProfilerStep#2", 1000, 1000),
        cpu_op("aten::mm", 10, 300),
        *launched("gemm_a", 310, 320, 200, corr=1),
        *launched("gemm_b", 1100, 1120, 380, corr=2),
    ]
    return write_trace(tmp / "trace.json", events)


def _torchdoctor(
    tmp: Path, *args: str, stdout: str = FULL, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    with open(stdout, "w") as out:
        return subprocess.run(
            [sys.executable, "-m", "torchdoctor", *args],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp,
            timeout=240,
            env={**os.environ, **(env or {})},
        )


def test_every_command_names_standard_output_on_a_full_device(tmp_path: Path) -> None:
    trace = str(_trace(tmp_path))
    snap = tmp_path / "snap.pickle"
    snap.write_bytes(pickle.dumps(snapshot(), protocol=4))
    runs = {
        "analyze": ["analyze", trace],
        "analyze --json": ["analyze", "--json", "-", trace],
        "compare": ["compare", trace, trace],
        "memory": ["memory", str(snap)],
        "help": ["analyze", "--help"],
    }
    for name, args in runs.items():
        proc = _torchdoctor(tmp_path, *args)
        assert (proc.returncode, proc.stderr) == (EXIT_OUTPUT, ON_STDOUT), name


@pytest.mark.parametrize(
    ("option", "what"),
    [("--json", "JSON report"), ("--html", "HTML report"), ("--export-trace", "trace")],
)
def test_a_file_on_a_full_device_is_named(tmp_path: Path, option: str, what: str) -> None:
    proc = _torchdoctor(
        tmp_path, "analyze", f"{option}={FULL}", str(_trace(tmp_path)), stdout=os.devnull
    )
    assert proc.returncode == EXIT_OUTPUT
    assert (
        proc.stderr
        == f"torchdoctor: error: cannot write the {what} to {FULL}: No space left on device\n"
    )


def test_a_healthy_output_still_exits_0(tmp_path: Path) -> None:
    """The probes that tell a failed standard output never fire on a working one."""
    out = tmp_path / "report.txt"
    proc = _torchdoctor(tmp_path, "analyze", str(_trace(tmp_path)), stdout=str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("torchdoctor")


@pytest.mark.slow
@pytest.mark.parametrize("watcher", ["1", "0"])
def test_check_keeps_its_run_folder_and_files_when_stdout_is_full(
    tmp_path: Path, watcher: str
) -> None:
    """The report is printed last: the run folder and the --json file are written first, and
    the one line names standard output."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(8, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for i in range(40):\n"
        "    model(torch.randn(4, 8)).square().mean().backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
    )
    args = ["check", "--warmup", "2", "--steps", "2", "--out", "runs", "--json", "r.json"]
    proc = _torchdoctor(
        tmp_path, *args, "train.py", env={"TORCHDOCTOR_WATCHER": watcher, "OMP_NUM_THREADS": "1"}
    )
    assert proc.returncode == EXIT_OUTPUT, proc.stderr[-2000:]
    assert proc.stderr.endswith(ON_STDOUT), proc.stderr[-2000:]
    assert "internal error" not in proc.stderr
    (folder,) = (tmp_path / "runs").iterdir()
    assert {p.name for p in folder.iterdir()} >= {"run.json", "report.json", "report.txt"}
    assert (tmp_path / "r.json").read_text() == (folder / "report.json").read_text() + "\n"
