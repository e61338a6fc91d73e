"""``--json [PATH]`` is the same in analyze, memory, compare and tune (check and fix decide by
the script's name): bare prints JSON, a PATH writes it, an input is never taken for PATH."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import corpus_file
from tests.memory.conftest import GPT, SNAPSHOTS
from torchdoctor.cli import cli
from torchdoctor.compare.cli import compare_command
from torchdoctor.json_arg import normalize_json
from torchdoctor.tune.cli import tune_command

TRACE = "a100_triton_kernel_micro"


def _analyze(*args: str) -> object:
    return CliRunner().invoke(cli, ["analyze", *args])


def test_bare_json_before_the_trace_prints_json_only() -> None:
    r = _analyze("--json", str(corpus_file(TRACE)))
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tool"]["name"] == "torchdoctor"


def test_json_path_before_or_after_the_trace_writes_the_file_and_prints_the_report(
    tmp_path: Path,
) -> None:
    trace = str(corpus_file(TRACE))
    for n, args in enumerate(
        [["--json", "{out}", trace], [trace, "--json", "{out}"], ["--json={out}", trace]]
    ):
        out = tmp_path / f"r{n}.json"
        r = _analyze(*(a.format(out=out) for a in args))
        assert r.exit_code == 0, (args, r.output)
        assert json.loads(out.read_text())["tool"]["name"] == "torchdoctor"
        assert not r.stdout.lstrip().startswith("{")  # the text report, not JSON
        assert f"wrote {out}" in r.stderr


def test_an_existing_report_is_overwritten_but_a_trace_never(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_bytes(gzip.decompress(corpus_file(TRACE).read_bytes()))
    before = trace.read_bytes()
    # two .json names: the trace is an input, so the bare --json prints and nothing is written
    r = _analyze("--json", str(trace))
    assert r.exit_code == 0 and json.loads(r.stdout)
    assert trace.read_bytes() == before
    old = tmp_path / "old.json"
    old.write_text('{"tool": {"name": "torchdoctor"}}')
    r = _analyze("--json", str(old), str(trace))
    assert r.exit_code == 0, r.output
    assert json.loads(old.read_text())["source"]
    assert trace.read_bytes() == before


def test_json_path_may_not_be_the_input_or_a_python_file(tmp_path: Path) -> None:
    trace = str(corpus_file(TRACE))
    r = _analyze(trace, "--json", trace)
    assert r.exit_code == 2 and "that is an input" in r.output
    r = _analyze(trace, "--json", str(tmp_path / "train.py"))
    assert r.exit_code == 2 and "Python file" in r.output
    r = _analyze(trace, "--json", str(tmp_path / "no" / "such" / "r.json"))
    assert r.exit_code == 2 and "no such folder" in r.output


def test_memory_takes_the_same_option(tmp_path: Path) -> None:
    gpt_snapshot = SNAPSHOTS / GPT
    if not gpt_snapshot.is_file():
        pytest.skip(f"real snapshot {gpt_snapshot} not found (set TORCHDOCTOR_SNAPSHOTS)")
    out = tmp_path / "m.json"
    r = CliRunner().invoke(cli, ["memory", str(gpt_snapshot), "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["devices"]
    r = CliRunner().invoke(cli, ["memory", "--json", str(gpt_snapshot)])
    assert r.exit_code == 0 and json.loads(r.stdout)["devices"]


def test_compare_counts_two_inputs(tmp_path: Path) -> None:
    a, b = str(corpus_file(TRACE)), str(corpus_file("a100_event_sync_micro"))
    r = CliRunner().invoke(compare_command, ["--json", a, b])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)
    out = tmp_path / "c.json"
    r = CliRunner().invoke(compare_command, ["--json", str(out), a, b])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text()) and not r.stdout.lstrip().startswith("{")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--json", "w.py"], ["--json", "-", "w.py"]),
        (["--json", "out.json", "w.py"], ["--json", "out.json", "w.py"]),
        (["w.py", "--json"], ["w.py", "--json", "-"]),
        (["--json", "--steps", "3", "w.py"], ["--json", "-", "--steps", "3", "w.py"]),
        (["--steps", "3", "--json", "w.py"], ["--steps", "3", "--json", "-", "w.py"]),
        (["--json", "-", "w.py"], ["--json", "-", "w.py"]),
    ],
)
def test_tune_reads_a_bare_json_as_stdout(args: list[str], expected: list[str]) -> None:
    assert normalize_json(args, tune_command, 1) == expected


def test_compare_never_takes_an_existing_run_folder_for_the_path(tmp_path: Path) -> None:
    for name in ("a1", "a2", "b1"):
        (tmp_path / name).mkdir()
    args = ["--json", str(tmp_path / "a1"), str(tmp_path / "a2"), "--", str(tmp_path / "b1")]
    got = normalize_json(args, compare_command, 2)
    assert got[:2] == ["--json", "-"]


def test_json_safe_writes_nan_and_infinities_as_null() -> None:
    """compare's and tune's JSON share one cleaner (each had its own copy)."""
    from torchdoctor.json_arg import json_safe

    nan, inf = float("nan"), float("inf")
    doc = {"a": [nan, inf, -inf, 1.5, (2, nan)], "b": {"c": inf, "d": "x"}, "e": None}
    assert json_safe(doc) == {
        "a": [None, None, None, 1.5, [2, None]],
        "b": {"c": None, "d": "x"},
        "e": None,
    }
    json.dumps(json_safe(doc), allow_nan=False)  # valid JSON: no NaN or Infinity token
