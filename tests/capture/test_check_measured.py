"""What a run measured, and the command line: an early exit is never a clean bill of health,
a script that does not parse or import is reported as such, ``--json`` output is JSON only,
and a misspelt option is not taken for the script. Unit tests on plain data, then a few
end-to-end runs on scripts written here."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.capture.check_helpers import check_inprocess, check_subprocess
from torchdoctor.capture.measurement import measure, suggested_options
from torchdoctor.capture.own_frames import is_ours, scrub
from torchdoctor.code_paths import PACKAGE_DIR
from torchdoctor.commands.check.args import normalize_args, reject_option_as_script
from torchdoctor.errors import UserError
from torchdoctor.record.run import RunRecord

TRAIN = (
    "import os, sys, torch\n"
    "model = torch.nn.Linear(8, 1)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "def train_step():\n"
    "    loss = model(torch.randn(4, 8)).square().mean()\n"
    "    opt.zero_grad(); loss.backward(); opt.step()\n"
)


def rec(count: int, measured: int, status: str = "completed", exc: str | None = None) -> Any:
    return RunRecord.from_dict(
        {
            "options": {"warmup_steps": 5, "profile_steps": 5},
            "steps": {"count": count, "measured_steps": measured},
            "exit": {"status": status, "code": 0 if exc is None else 1, "exception": exc},
        }
    )


@pytest.mark.parametrize(
    ("seen", "requested", "expected"),
    [(7, 5, "--warmup 2"), (3, 5, "--warmup 1 --steps 2"), (1, 5, "--warmup 0 --steps 1")],
)
def test_suggested_options_fit_the_steps_seen(seen: int, requested: int, expected: str) -> None:
    assert suggested_options(seen, requested) == expected


def test_short_run_says_what_was_measured() -> None:
    m = measure(rec(7, 2))
    assert not m.complete and m.measured_steps == 2
    assert m.note.startswith("2 steps measured of 5 requested: the script ended after 7 steps")
    assert "try --warmup 2" in m.note and "not a clean bill of health" in m.note
    crashed = measure(rec(3, 0, "error", "RuntimeError: diverged"))
    assert "the script crashed (RuntimeError: diverged) after 3 steps" in crashed.note
    assert measure(rec(10, 5, "stopped")).complete


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        ("SyntaxError: invalid syntax (prog.py, line 3)", "syntax-error"),
        ("IndentationError: unexpected indent (prog.py, line 2)", "syntax-error"),
        ("ModuleNotFoundError: No module named 'tranformers'", "import-error"),
        ("ImportError: cannot import name 'Foo' from 'bar'", "import-error"),
        ("RuntimeError: boom", "crash"),
    ],
)
def test_failures_before_any_step_are_named(exc: str, kind: str | None) -> None:
    m = measure(rec(0, 0, "error", exc))
    assert m.failure == kind
    if kind:
        assert "nothing was measured" in m.note and "--warmup" not in m.note


def test_option_before_the_script_is_not_a_script() -> None:
    with pytest.raises(UserError, match=r"no such option: --stesp; did you mean --steps\?"):
        reject_option_as_script("--stesp")
    reject_option_as_script("train.py")  # a script is fine


def test_bare_json_never_swallows_the_script() -> None:
    assert normalize_args(["--json", "train.py", "--json", "x"]) == [
        "--json",
        "-",
        "train.py",
        "--json",
        "x",  # after the script: the script's own argument, untouched
    ]
    assert normalize_args(["--json", "out.json", "train.py"]) == ["--json", "out.json", "train.py"]
    assert normalize_args(["--steps", "3", "--json"]) == ["--steps", "3", "--json", "-"]


def test_our_own_sites_are_scrubbed_from_every_list() -> None:
    ours = os.path.join(PACKAGE_DIR, "capture", "syncs.py") + ":107"
    record = {
        "compile": {
            "graph_breaks": [{"site": ours}, {"site": "/u/train.py:9"}],
            "recompile_events": [{"site": ours}],
        },
        "syncs": {"host_syncs": [{"site": ours}], "sync_debug": [{"site": "/u/a.py:3"}]},
    }
    before = copy.deepcopy(record)
    scrubbed = scrub(record)
    assert record == before  # a copy: the record given is left as it is
    assert scrubbed["compile"]["graph_breaks"] == [{"site": "/u/train.py:9"}]
    assert scrubbed["compile"]["recompile_events"] == [] and scrubbed["syncs"]["host_syncs"] == []
    assert scrubbed["own_frames"]["compile.graph_breaks"] == [ours]
    assert scrubbed["syncs"]["sync_debug"] == [{"site": "/u/a.py:3"}]
    assert not is_ours("aten::mm") and not is_ours("/u/train.py:9")


# -- end to end ----------------------------------------------------------------------------------
def write(tmp_path: Path, body: str, name: str = "prog.py") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def test_early_exit_reports_what_was_measured(tmp_path: Path) -> None:
    prog = write(tmp_path, TRAIN + "for _ in range(4): train_step()\nsys.exit(4)\n")
    # --warmup 3 --steps 3 and 8 clean steps by default: nothing measured
    r = check_inprocess(tmp_path / "runs", prog)
    assert r.code == 4
    assert "0 steps measured of 3 requested" in r.stdout
    assert "try --warmup 1 --clean-steps 0" in r.stdout
    assert "No bottleneck worth fixing" not in r.stdout and "findings: none\n" not in r.stdout
    assert r.report["measurement"]["complete"] is False
    assert r.report["verdict"] == r.report["measurement"]["note"]


@pytest.mark.parametrize(
    ("body", "kind", "code"),
    [
        ("import torch\nfor i in range(3)\n    pass\n", "SyntaxError", 1),
        ("import torch\nimport tranformers_typo\n", "ModuleNotFoundError", 1),
    ],
)
def test_syntax_and_import_errors_get_no_step_advice(
    tmp_path: Path, body: str, kind: str, code: int
) -> None:
    r = check_inprocess(tmp_path / "runs", write(tmp_path, body))
    assert r.code == code
    assert f"the script {'does not parse' if kind == 'SyntaxError' else 'failed to import'}" in (
        r.stdout
    )
    assert "torchdoctor.step()" not in r.stdout and "findings" not in r.stdout
    assert r.report["findings"] == [] and r.report["measurement"]["failure"]


@pytest.mark.slow
def test_json_on_stdout_is_only_json(tmp_path: Path) -> None:
    body = TRAIN + (
        "print('hello from the script')\n"
        "os.write(1, b'raw bytes on fd 1\\n')\n"
        "for _ in range(8): train_step()\n"
    )
    r = check_subprocess(tmp_path / "runs", write(tmp_path, body), opts=["--json", "--warmup", "2"])
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)  # the whole of stdout parses
    assert doc["schema"] == "torchdoctor.check-report"
    assert "hello from the script" in r.stderr and "raw bytes on fd 1" in r.stderr


def test_json_path_writes_a_file_and_keeps_the_text(tmp_path: Path) -> None:
    prog = write(tmp_path, TRAIN + "print('hi')\nfor _ in range(8): train_step()\n")
    out = tmp_path / "report.json"
    r = check_inprocess(tmp_path / "runs", prog, opts=["--json", str(out), "--warmup", "2"])
    assert r.code == 0
    assert json.loads(out.read_text())["schema"] == "torchdoctor.check-report"
    assert r.stdout.startswith("hi\ntorchdoctor check:")


def test_json_path_that_is_a_script_is_refused(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    r = check_inprocess(tmp_path / "runs", "train.py", opts=["--json=other.py"])
    assert r.code == 2 and "refusing to overwrite a Python file" in r.stderr


def test_misspelt_option_is_no_such_option(tmp_path: Path) -> None:
    prog = write(tmp_path, TRAIN)
    (tmp_path / "runs").mkdir()
    r = check_subprocess(tmp_path / "runs", prog, opts=["--stesp", "3"])
    assert r.code == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        "torchdoctor: error: no such option: --stesp; did you mean --steps? "
        "(check's options go before the script; see torchdoctor check --help)"
    )
    assert not any((tmp_path / "runs").iterdir())  # the script never ran: no run folder
