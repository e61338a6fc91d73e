"""``torchdoctor check`` on real public training scripts (vendored in this folder, run small on
synthetic data made here; nothing is downloaded): each ends with the script's own exit status
and a report, and every fix in the report runs against the real API (``tests/core/fixexec``:
the options it names exist on the objects it names, no default is shown as a change)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.core import fixexec
from tests.public.scripts import HERE, SCRIPTS, WINDOWS, prepare

pytest.importorskip("torch")

REPO = HERE.parents[1]
# the check process's peak resident memory must stay well under what the machine has
# (time_sequence_prediction's unbounded profiler grew to 24 GB before the budget)
PEAK_CAP_BYTES = 4 * 2**30


def _check(name: str, tmp: Path) -> tuple[int, dict[str, Any], str]:
    work = tmp / name
    script, args, env_extra = prepare(name, work)
    out = tmp / "runs"
    env = {**os.environ, **env_extra, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "torchdoctor", "check", *WINDOWS.get(name, [])]
    cmd += ["--out", str(out), script, *args]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    folders = [p for p in out.iterdir() if p.is_dir()] if out.is_dir() else []
    assert len(folders) == 1, proc.stderr[-3000:]
    report = json.loads((folders[0] / "report.json").read_text())
    return proc.returncode, report, proc.stdout + proc.stderr


def _user_names() -> dict[str, Any]:
    """The scripts' own names that fixes rebuilt from their calls keep (minGPT's and nanoGPT's
    optimizer and DataLoader calls), bound to real objects of the kind the scripts pass."""
    ns = fixexec.namespace()
    params = ns["params"]
    return {
        "optim_groups": [{"params": params[:1], "weight_decay": 0.1}, {"params": params[1:]}],
        "learning_rate": 1e-3,
        "betas": (0.9, 0.95),
        "extra_args": {},
        "train_config": SimpleNamespace(learning_rate=1e-3, betas=(0.9, 0.95)),
        "config": SimpleNamespace(batch_size=4, num_workers=4),  # minGPT Trainer's default
        "self": SimpleNamespace(train_dataset=ns["dataset"]),
        "optim": __import__("torch").optim,  # vae's and mnist's `from torch import optim`
    }


def _line_of(path: Path, text: str) -> int:
    (n,) = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    return n


# mnist and dcgan run in scripts/public_scripts_table.py only (its --fix run patches them and
# runs the patched script): the suite keeps its new subprocess time to one more check (vae's)
TABLE_ONLY = ("mnist", "dcgan")


AT_ONCE = 2
"""Checks running at a time: each script runs with one intra-op thread while this process only
waits, so on a 2-core machine two at once take about half the time of one after another."""
ALONE = ("nanogpt",)
"""Checked by itself once the others are done: its assertion rests on timing (the evaluation
step found long against the median, at its line, by the sampled stacks)."""


@pytest.fixture(scope="module")
def checked(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], tuple[int, dict[str, Any], str]]]:
    """``check`` of every script this module's selected tests ask for, started together when
    the first of them runs (``AT_ONCE`` at a time; each ``ALONE`` script by itself after
    them); each test waits for and reads its own run."""
    wanted = [
        item.callspec.params["name"]
        for item in request.session.items
        if getattr(item, "module", None) is request.module
        and getattr(item, "originalname", "") == "test_public_script_report_and_fixes"
    ]
    pool = ThreadPoolExecutor(max_workers=AT_ONCE)
    runs = {
        n: pool.submit(_check, n, tmp_path_factory.mktemp(n))
        for n in dict.fromkeys(wanted)
        if n not in ALONE
    }

    def run(name: str) -> tuple[int, dict[str, Any], str]:
        if name in ALONE:
            wait(runs.values())
            return _check(name, tmp_path_factory.mktemp(name))
        return runs[name].result()

    yield run
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in SCRIPTS if n not in TABLE_ONLY])
def test_public_script_report_and_fixes(
    checked: Callable[[str], tuple[int, dict[str, Any], str]], name: str
) -> None:
    code, report, output = checked(name)
    assert code == 0, output[-3000:]
    assert report["measurement"]["measured_steps"] > 0, report["measurement"]
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    assert peak < PEAK_CAP_BYTES, f"{peak / 2**20:.0f} MiB"
    for f in report["findings"]:
        if f.get("fix"):
            fixexec.run_fix(f["fix"], extra=_user_names())
    found = {f["id"]: f for f in report["findings"]}
    if name == "nanogpt":
        # an evaluation every 5 iterations inside the window: a rare long step, at its line
        line = _line_of(HERE / "nanogpt" / "train.py", "losses = estimate_loss()")
        assert f"train.py:{line}" in found["rare-long-steps"]["where"][0], found
