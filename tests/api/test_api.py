"""The public API: ``torchdoctor.analyze`` over files, folders and lists; the CLI prints what the
API returns; ``check`` on scripts and functions; importing never loads a framework or torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import torchdoctor
from tests.conftest import corpus_file
from tests.core.synth import annotation, launched, write_trace
from torchdoctor.cli import cli
from torchdoctor.errors import TraceError, UserError


def _rank_trace(path: Path, rank: int, gemm_us: float) -> Path:
    ev = [annotation("ProfilerStep#1", 0, 1000), *launched("gemm", 5, 10, gemm_us, corr=1)]
    return write_trace(path, ev, distributedInfo={"rank": rank, "world_size": 2})


def test_analyze_a_list_of_rank_files_orders_them_by_rank(tmp_path: Path) -> None:
    late = _rank_trace(tmp_path / "b.json", 1, 300.0)
    early = _rank_trace(tmp_path / "a.json", 0, 100.0)
    report = torchdoctor.analyze([late, early])
    assert [r.rank for r in report.ranks] == [0, 1]
    assert report.analysis.table.meta.rank == 1  # details are the slowest rank's (300 ms steps)
    assert [r.rank for r in torchdoctor.analyze(tmp_path).ranks] == [0, 1]  # same as a folder
    assert torchdoctor.analyze([early]).ranks == []  # one file: no rank table


def test_analyze_bad_input_is_one_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="at least one trace"):
        torchdoctor.analyze([])
    with pytest.raises(UserError, match="no such trace file"):
        torchdoctor.analyze([tmp_path / "missing.json", tmp_path / "other.json"])
    (tmp_path / "bad.json").write_text("not json")
    with pytest.raises(TraceError):
        torchdoctor.analyze(tmp_path / "bad.json")


@pytest.mark.slow
def test_report_is_typed_and_its_json_is_the_cli_output() -> None:
    path = corpus_file("v100_ddp_compiled_rank1")
    report = torchdoctor.analyze(path)
    assert isinstance(report, torchdoctor.Report)
    assert report.breakdown.busy_ms["communication"] > 0
    assert report.finding("exposed-communication") is not None
    assert report.finding("no-such-id") is None
    out = CliRunner().invoke(cli, ["analyze", "--json", str(path)])
    assert out.exit_code == 0
    assert json.loads(out.output) == json.loads(report.to_json())
    assert report.to_dict()["verdict"] == report.verdict
    text = CliRunner().invoke(cli, ["analyze", str(path)]).output
    assert report.verdict.split(".")[0] in " ".join(text.split())


def test_import_loads_no_framework_and_analyze_no_torch() -> None:
    code = (
        "import sys, torchdoctor, torchdoctor.api, torchdoctor.integrations, "
        "torchdoctor.rules.framework_advice, torchdoctor.capture.frameworks\n"
        f"torchdoctor.analyze({str(corpus_file('a100_triton_kernel_micro'))!r})\n"
        "heavy = ('torch', 'lightning', 'pytorch_lightning', 'transformers', 'accelerate')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_check_a_script_with_arguments(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, torch\n"
        "m = torch.nn.Linear(8, 8); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(int(sys.argv[1])):\n"
        "    m(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()\n"
        "sys.exit(int(sys.argv[2]))\n"
    )
    full = torchdoctor.check(
        script, ["4", "3"], warmup_steps=1, profile_steps=1, full=True, out_dir=tmp_path / "runs"
    )
    assert full.exit_code == 3 and full.steps["count"] == 4
    assert full.record["argv"] == ["4", "3"] and full.record["exit"]["status"] == "exited"
    assert (full.run.exit_status, full.run.steps.count) == ("exited", 4)
    assert full.report is not None and full.text.startswith("torchdoctor check:")
    summary = full.summary  # report.json typed
    assert summary is not None and summary.verdict == full.report["verdict"]
    assert summary.measurement.measured_steps == full.report["measurement"]["measured_steps"]
    assert [f.id for f in summary.findings] == [f["id"] for f in full.report["findings"]]
    assert summary.world_size == 1 and summary.ranks_reported == (0,)
    account = full.report["account"]
    assert summary.account is not None and summary.account.explained is account["explained"]
    assert summary.account.to_dict() == {**account, "top_lines": account.get("top_lines", [])}


def test_check_rejects_unknown_options_and_missing_scripts(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unexpected keyword"):
        torchdoctor.check(tmp_path / "train.py", profile_stpes=3)
    with pytest.raises(UserError, match="no such script"):
        torchdoctor.check(tmp_path / "train.py", out_dir=tmp_path / "runs")
    with pytest.raises(UserError, match="--steps must be >= 1"):
        torchdoctor.check(tmp_path / "train.py", profile_steps=0)


def test_check_a_function_that_raises_keeps_its_status(tmp_path: Path) -> None:
    import torch

    def train() -> None:
        m = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(3):
            m(torch.randn(4, 8)).sum().backward()
            opt.step()
        raise RuntimeError("diverged")

    result = torchdoctor.check(train, warmup_steps=5, out_dir=tmp_path / "runs")
    assert result.exit_code == 1 and result.record["exit"]["status"] == "error"
    assert "RuntimeError: diverged" in result.record["exit"]["exception"]
    assert result.folder.name.startswith("test_check_a_function_that_raises_keeps_its_status")


def test_framework_hint_only_for_the_framework_that_stepped(tmp_path: Path) -> None:
    import types

    from torchdoctor.capture.frameworks import framework_hint, frameworks_on_stack

    # A fake framework package on the stack counts; one merely imported does not.
    mod = types.ModuleType("lightning.pytorch.loops.fake")
    exec("import sys\ndef run(f):\n    return f(sys._getframe())", mod.__dict__)
    assert mod.run(frameworks_on_stack) == ["lightning"]
    assert frameworks_on_stack(sys._getframe()) == []
    assert "DoctorCallback" in framework_hint(["transformers"]) and framework_hint([]) == ""
    plain = torchdoctor.check(lambda: None, out_dir=tmp_path / "runs")
    assert plain.record["frameworks"] == [] and "hint:" not in plain.text
