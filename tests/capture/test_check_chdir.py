"""A script that changes its working directory keeps its report.

Before: under ``check --out relative-runs``, a script that called ``os.chdir(tempfile.mkdtemp())``
before its loop left only ``steps.log`` in the run folder (the record, trace and report went to
the new folder, the watching parent found nothing) and the run ended with "internal error".
Hydra (``hydra.job.chdir=True``) restores the folder when its job returns, so there the report
survived, but every site recorded during the job named a file under Hydra's outputs folder that
does not exist, and ``fix --from`` refused them. Every path check is given is now absolute before
the script runs, and so is the script's own file name (as python's is).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.capture.check_helpers import FAST

pytestmark = pytest.mark.slow

# A loader that waits 2 ms per sample in the main process and a tiny model: the step is mostly
# data wait, so check names the DataLoader line and fix has a site to patch.
LOOP = """
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(Slow(), batch_size=8)
for x in loader:
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
"""
HEAD = """
import os, sys, tempfile, time
import torch
torch.set_num_threads(1)
class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 4096
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.randn(32)
"""
PLAIN = (
    HEAD
    + """
moved = tempfile.mkdtemp()
with open(sys.argv[1], "w") as f:
    f.write(moved)
os.chdir(moved)
"""
    + LOOP
)
HYDRA = (
    HEAD
    + """
import hydra

@hydra.main(version_base=None, config_path=None)
def main(cfg):
    print("job cwd:", os.getcwd(), file=sys.stderr)
"""
    + textwrap.indent(LOOP, "    ")
    + """
if __name__ == "__main__":
    main()
"""
)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **extra}


def _start(cwd: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "torchdoctor", *args],
        cwd=cwd,
        env=_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _done(proc: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"{proc.args} did not end") from None
    return proc.returncode, out, err


def _one_folder(parent: Path) -> Path:
    folders = [p for p in parent.iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    return folders[0]


def _assert_complete(folder: Path, script: Path) -> None:
    """Every file of a one-process run, and every site of the script names the script itself."""
    for name in ("run.json", "report.json", "report.txt", "trace.json.gz", "steps.log"):
        assert (folder / name).is_file(), (name, sorted(os.listdir(folder)))
    text = (folder / "run.json").read_text() + (folder / "report.json").read_text()
    sites = set(re.findall(r"(/[^\s\"']*?" + re.escape(script.name) + r"):\d+", text))
    assert sites == {str(script)}, sites  # not one under the folder the script moved to


def _read_back(tmp: Path, folder: Path, script: Path) -> None:
    """``compare`` and ``fix --from`` read the run folder; fix patches the loader's line."""
    compare = _start(tmp, "compare", "--json", "-", str(folder), str(folder))
    fix = _start(tmp, "fix", "--from", str(folder))
    code, out, err = _done(compare)
    assert code == 0, err[-2000:]
    assert json.loads(out)  # a comparison document, not an error
    code, out, err = _done(fix)
    assert code == 0, err[-2000:]
    assert "not a file here" not in err, err[-2000:]
    assert f"+++ b/{script.name}" in out and "num_workers" in out, (out[-2000:], err[-2000:])


@pytest.mark.parametrize("watcher", ["1", "0"])
def test_a_script_that_changes_directory_keeps_its_report(tmp_path: Path, watcher: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(PLAIN)
    (tmp_path / "out").mkdir()
    (tmp_path / "tmp").mkdir()
    args = ["--json", "out/report.json", "--html", "out/report.html"]
    proc = _start(
        tmp_path,
        "check",
        *FAST,
        "--out",
        "relative-runs",
        *args,
        "train.py",
        "moved.txt",
        TORCHDOCTOR_WATCHER=watcher,
        TMPDIR=str(tmp_path / "tmp"),
    )
    code, out, err = _done(proc)
    assert code == 0, err[-3000:]
    assert "internal error" not in err, err[-3000:]
    moved = Path((tmp_path / "moved.txt").read_text())
    assert moved.parent == tmp_path / "tmp" and moved.is_dir()
    assert os.listdir(moved) == []  # nothing of ours went where the script moved to
    folder = _one_folder(tmp_path / "relative-runs")
    _assert_complete(folder, script)
    assert json.loads((tmp_path / "out" / "report.json").read_text()) == json.loads(
        (folder / "report.json").read_text()
    )
    assert (tmp_path / "out" / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert f"run folder: {folder}" in out
    _read_back(tmp_path, folder, script)


def test_a_hydra_job_that_changes_directory(tmp_path: Path) -> None:
    pytest.importorskip("hydra", reason="hydra-core is not installed (pip install -e '.[dev]')")
    script = tmp_path / "hydra_app.py"
    script.write_text(HYDRA)
    proc = _start(tmp_path, "check", *FAST, "--out", "runs", "hydra_app.py", "hydra.job.chdir=True")
    code, out, err = _done(proc)
    assert code == 0, err[-3000:]
    job_cwd = Path(re.findall(r"job cwd: (.+)", err)[0])
    # The job really ran elsewhere: Hydra's outputs folder, with its saved config.
    assert job_cwd != tmp_path and job_cwd.is_relative_to(tmp_path / "outputs"), job_cwd
    assert (job_cwd / ".hydra" / "config.yaml").is_file()
    folder = _one_folder(tmp_path / "runs")
    _assert_complete(folder, script)
    assert f"run folder: {folder}" in out
    assert not any(p.name == "runs" for p in job_cwd.rglob("*"))
    _read_back(tmp_path, folder, script)


def test_fix_runs_check_in_process_and_writes_where_it_started(tmp_path: Path) -> None:
    """``fix SCRIPT`` runs check in its own process: the script's chdir stays behind it, so
    ``--json`` lands where fix was started and the patch names the script."""
    script = tmp_path / "train.py"
    script.write_text(PLAIN)
    (tmp_path / "tmp").mkdir()
    proc = _start(
        tmp_path,
        "fix",
        *FAST,
        "--json",
        "fix.json",
        "train.py",
        "moved.txt",
        TMPDIR=str(tmp_path / "tmp"),
    )
    code, out, err = _done(proc)
    assert code == 0, err[-3000:]
    doc = json.loads((tmp_path / "fix.json").read_text())
    assert doc["run_folder"].startswith(str(tmp_path / "torchdoctor-runs")), doc["run_folder"]
    assert "num_workers" in out and "+++ b/train.py" in out, (out[-2000:], err[-2000:])
    assert os.listdir(Path((tmp_path / "moved.txt").read_text())) == []
