"""``compare`` and ``tune`` on hostile inputs, and the exit statuses every command keeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.hostile.limits import env, one_line_error, run

TUNE_BAD = {
    "best-a-list": {"best": [], "ranked": []},
    "times-a-string": {"best": {"step_times_s": "0.1"}, "ranked": []},
    "times-mixed": {"best": {"step_times_s": [0.1, "x"]}, "ranked": []},
    "times-nan": {"best": {"step_times_s": [0.1, float("nan")]}, "ranked": []},
    "times-negative": {"best": {"step_times_s": [0.1, -1]}, "ranked": []},
    "median-a-string": {"best": {"median_step_s": "1"}, "ranked": []},
    "finding-ids-an-int": {"best": {"step_times_s": [0.1, 0.2]}, "ranked": [], "finding_ids": 5},
    "assignment-a-list": {"best": {"step_times_s": [0.1], "assignment": [1]}, "ranked": []},
}


@pytest.mark.parametrize("name", sorted(TUNE_BAD))
def test_tune_results_of_the_wrong_shape(tmp_path: Path, traces_dir: Path, name: str) -> None:
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(TUNE_BAD[name]))  # NaN goes out as the json module writes it
    trace = traces_dir / "a100_event_sync_micro.json.gz"
    one_line_error(run(["compare", str(path), str(trace)], timeout_s=40), 2)


def _run_folder(tmp: Path, run_json: Any, **files: Any) -> Path:
    folder = tmp / "run"
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps(run_json))
    for name, content in files.items():
        (folder / name).write_text(json.dumps(content))
    return folder


RUN_BAD = {
    "run-a-list": ([1, 2], {}),
    "steps-a-list": ({"steps": [1, 2]}, {}),
    "step-times-strings": ({"steps": {"step_ms": ["1", "2"]}}, {}),
    "warmup-a-string": ({"steps": {"step_ms": [1.0, 2.0], "warmup_steps": "1"}}, {}),
    "rank-record-outside": ({"ranks": {"0": "../../../../etc/hostname"}}, {}),
    "ranks-a-list": ({"ranks": ["ranks/rank0.json"]}, {}),
    "findings-not-a-list": (
        {"steps": {"step_ms": [1.0, 2.0, 3.0]}},
        {"report.json": {"findings": {"id": "x"}}},
    ),
}


@pytest.mark.parametrize("name", sorted(RUN_BAD))
def test_run_folders_of_the_wrong_shape(tmp_path: Path, traces_dir: Path, name: str) -> None:
    run_json, files = RUN_BAD[name]
    folder = _run_folder(tmp_path, run_json, **{k.replace(".", "_"): v for k, v in files.items()})
    for k in files:  # names with a dot cannot be keyword arguments: write them as they are
        (folder / k.replace(".", "_")).rename(folder / k)
    trace = traces_dir / "a100_event_sync_micro.json.gz"
    one_line_error(run(["compare", str(folder), str(trace)], timeout_s=40), 2)


def test_a_rank_record_that_is_a_fifo_is_refused(tmp_path: Path, traces_dir: Path) -> None:
    folder = _run_folder(tmp_path, {"ranks": {"0": "ranks/rank0.json"}})
    (folder / "ranks").mkdir()
    os.mkfifo(folder / "ranks" / "rank0.json")
    trace = traces_dir / "a100_event_sync_micro.json.gz"
    one_line_error(run(["compare", str(folder), str(trace)], timeout_s=30), 2, "FIFO")


@pytest.mark.slow
@pytest.mark.parametrize("side", [0, 1])
def test_compare_refuses_fifos_and_deep_json(tmp_path: Path, traces_dir: Path, side: int) -> None:
    trace = str(traces_dir / "a100_event_sync_micro.json.gz")
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    args = [trace, str(fifo)] if side else [str(fifo), trace]
    one_line_error(run(["compare", *args], timeout_s=30), 2, "FIFO")
    deep = tmp_path / "deep.json"
    deep.write_text('{"best": ' + "[" * 100_000 + "]" * 100_000 + ', "ranked": []}')
    args = [trace, str(deep)] if side else [str(deep), trace]
    one_line_error(run(["compare", *args], timeout_s=30), 2)


# -- exit statuses ----------------------------------------------------------------------------


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a bug")


@pytest.mark.parametrize(
    "command, target",
    [
        (["analyze", "{trace}"], "torchdoctor.commands.analyze.trace.analyze_path"),
        (["compare", "{trace}", "{trace}"], "torchdoctor.compare.diff.compare"),
        (["memory", "{snapshot}"], "torchdoctor.memory.ingest.ingest"),
        (["tune", "{workload}"], "torchdoctor.tune.cli._checked"),
    ],
)
def test_internal_errors_exit_3_in_every_command(
    tmp_path: Path,
    traces_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    target: str,
) -> None:
    """Before: exit 1, which compare also uses for "slower", so a crash in CI read as a
    regression."""
    import importlib

    from torchdoctor.cli import cli

    module, name = target.rsplit(".", 1)
    monkeypatch.setattr(importlib.import_module(module), name, _boom)
    snapshot = tmp_path / "s.pickle"
    snapshot.write_bytes(b"\x80\x04}.")
    workload = Path(__file__).parents[1] / "tune" / "workloads" / "tiny.py"
    values = {
        "trace": str(traces_dir / "a100_event_sync_micro.json.gz"),
        "snapshot": str(snapshot),
        "workload": str(workload),
    }
    args = [a.format(**values) for a in command]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 3, (result.exit_code, result.output)
    assert "torchdoctor: internal error: RuntimeError: a bug" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_check_report_failure_exits_3_when_the_script_succeeded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchdoctor.commands.check import publish
    from torchdoctor.commands.check.cli import check_command

    monkeypatch.setattr(publish, "build_report", _boom)
    script = tmp_path / "s.py"
    script.write_text("x = 1\n")
    result = CliRunner().invoke(check_command, ["--out", str(tmp_path / "runs"), str(script)])
    assert result.exit_code == 3, result.output
    assert "internal error while writing the report" in result.stderr


@pytest.mark.parametrize(
    "args, needle",
    [
        (["analyze", "--top", "0", "x.json"], "--top"),
        (["compare", "a", "b", "--fail-if-slower", "-5"], "--fail-if-slower"),
        (["check", "/"], "is a directory"),
        (["check", "--json", "/", "s.py"], "--json"),
        (["check", "--timeout", "-1", "s.py"], "--timeout"),
        (["memory"], "Missing argument"),
        (["no-such-command"], "No such command"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], needle: str) -> None:
    """Before: three lines (usage, a hint, the error)."""
    one_line_error(run(args, timeout_s=30), 2, needle)


# -- tune ----------------------------------------------------------------------------------------

TINY = str(Path(__file__).parents[1] / "tune" / "workloads" / "tiny.py")


def test_a_run_is_measured_by_one_process_at_a_time(tmp_path: Path) -> None:
    """Before: two --resume of one run both re-ran every trial and SQLite kept one silently."""
    from torchdoctor.errors import UserError
    from torchdoctor.tune.store import RunLock, Store

    db = Store(tmp_path / "t.sqlite")
    run_id = db.new_run("w.py", {})
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from torchdoctor.tune.store import RunLock;"
            f"lock = RunLock(Path({str(db.path)!r}), {run_id}).acquire('w.py');"
            "print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match="being measured by torchdoctor tune"):
            RunLock(db.path, run_id).acquire("w.py")
        RunLock(db.path, run_id + 1).acquire("w.py").release()  # another run is free
    finally:
        holder.kill()
        holder.wait()
    RunLock(db.path, run_id).acquire("w.py").release()  # a dead holder's lock is gone


@pytest.mark.slow
def test_the_trial_worker_dies_with_the_tuner(tmp_path: Path) -> None:
    """Before: after kill -9 of the tuner the worker lived on and its folder stayed."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torchdoctor",
            "tune",
            TINY,
            "--knobs",
            "num_workers",
            "--steps",
            "6",
            "--warmup",
            "2",
            "--fidelity-steps",
            "6",
            "--max-trials",
            "4",
            "--db",
            str(tmp_path / "t.sqlite"),
            "--out",
            str(tmp_path / "b.toml"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env(TMPDIR=str(tmp_path), TD_TUNE_TEST_MODE="hang"),  # the trial lasts: it is killed
    )
    worker, folder = None, None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and worker is None:
        for spec in tmp_path.glob("td-arm-*/spec.json"):  # ab.child.run_child's folder
            pids = _workers_of(spec)
            if pids:
                worker, folder = pids[0], spec.parent
        time.sleep(0.2)
    time.sleep(3)  # well into the trial (torch imported, the model built)
    proc.kill()
    proc.wait()
    assert worker is not None and folder is not None, "no trial worker appeared"
    assert _alive(worker), "the trial ended before the tuner was killed: nothing tested"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (_alive(worker) or folder.exists()):
        time.sleep(0.2)
    assert not _alive(worker), "the worker outlived the tuner"
    assert not folder.exists(), "the trial's folder outlived the tuner"


def _workers_of(spec: Path) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"torchdoctor.tune.worker" in cmd and str(spec).encode() in cmd:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.slow
def test_page_policy_runs_only_the_pages_own_script(tmp_path: Path, traces_dir: Path) -> None:
    """Before: 'unsafe-inline' let any inline script run; escaping was the only defence. Now a
    script the page did not write (here planted past the escaping on purpose) never runs,
    while the page's own script (by its hash) still draws the page."""
    pytest.importorskip("playwright")
    from tests.report.browser import chromium_path

    if chromium_path() is None:
        pytest.skip("no chromium")
    from torchdoctor.commands.analyze.trace import analyze_path
    from torchdoctor.report.html import CSP, render_html
    from torchdoctor.report.html_model import page_from_report

    assert "unsafe-inline" not in CSP.split("script-src", 1)[1].split(";", 1)[0]
    html = render_html(page_from_report(analyze_path(traces_dir / "a100_event_sync_micro.json.gz")))
    planted = html.replace(
        "<body>", "<body><script>window.__planted=1</script><img src=x onerror=window.__img=1>", 1
    )
    page_file = tmp_path / "planted.html"
    page_file.write_text(planted)
    from playwright.sync_api import sync_playwright

    from tests.report.browser import CHROMIUM_ARGS

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(page_file.as_uri())
            page.wait_for_timeout(500)
            assert page.evaluate("() => window.__planted") is None
            assert page.evaluate("() => window.__img") is None
            # the page's own script ran: it fills the timeline's SVG
            assert page.eval_on_selector_all("svg *", "els => els.length") > 0
        finally:
            browser.close()
