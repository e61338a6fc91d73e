"""``torchdoctor fix --from RUN`` on hand-written run folders: the patch on stdout, the JSON, the
write with the original kept, the HTML page, and one-line errors."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from torchdoctor.cli import cli

SCRIPT = '''
"""A training script with a loader that starves the step."""
import torch
from torch.utils.data import DataLoader

torch.autograd.set_detect_anomaly(True)  # </script><b>left on</b>
loader = DataLoader(
    ds,
    batch_size=8,
    shuffle=True,
)
'''


def run_folder(tmp: Path, findings: list[dict[str, Any]]) -> Path:
    (tmp / "train.py").write_text(textwrap.dedent(SCRIPT).lstrip())
    folder = tmp / "torchdoctor-runs" / "train-1"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"script": "train.py", "argv": [], "gpu": None}))
    (folder / "report.json").write_text(json.dumps({"findings": findings}))
    return folder


LOADER = {
    "id": "dataloader-config",
    "title": "the step waits",
    "severity": "critical",
    "saving_ms_per_step": 20.0,
    "share_of_step": 0.8,
    "evidence": {
        "mean_step_ms": 25.0,
        "suggested_num_workers": 2,
        "dataloader": {"num_workers": 0, "cpus_per_rank": 2, "call": {"site": "train.py:6"}},
    },
    "where": [],
}
ANOMALY = {"id": "anomaly-detection", "severity": "warning", "evidence": {}, "where": []}


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return run_folder(tmp_path, [LOADER, ANOMALY])


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["fix", *args])


def test_the_patch_goes_to_stdout_and_the_summary_to_stderr(folder: Path) -> None:
    r = invoke("--from", str(folder))
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("--- a/train.py\n+++ b/train.py\n")
    assert (
        "+    num_workers=2,\n+    persistent_workers=True,\n+    prefetch_factor=4,\n )"
        in r.stdout
    )
    assert "-torch.autograd.set_detect_anomaly(True)  # </script><b>left on</b>" in r.stdout
    assert "torchdoctor fix: 2 finding(s) with a code remedy; 2 patched" in r.stderr
    assert "predicted: 5.00x (saves 20.0 of 25.0 ms per step)" in r.stderr


def test_json_lists_every_change(folder: Path) -> None:
    r = invoke("--json", "--from", str(folder))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == "torchdoctor.fix" and doc["schema_version"] == 1
    rows = [(c["finding"], c["codemod"], c["file"], c["line"], c["status"]) for c in doc["changes"]]
    assert rows == [
        ("dataloader-config", "dataloader-args", "train.py", 6, "patched"),
        ("anomaly-detection", "anomaly-off", "train.py", 5, "patched"),
    ]
    assert doc["changes"][0]["predicted"]["speedup"] == pytest.approx(5.0)
    assert doc["patch"].count("+++ b/train.py") == 1


def test_write_keeps_the_original_and_a_second_run_changes_nothing(folder: Path) -> None:
    before = Path("train.py").read_text()
    r = invoke("--write", "--from", str(folder))
    assert r.exit_code == 0, r.output
    assert Path("train.py.orig").read_text() == before
    after = Path("train.py").read_text()
    assert "num_workers=2" in after and "set_detect_anomaly(False)" in after
    compile(after, "train.py", "exec")
    again = invoke("--json", "--from", str(folder))
    doc = json.loads(again.stdout)
    assert [c["status"] for c in doc["changes"]] == ["already", "already"]
    assert doc["patch"] == ""


def test_only_filters_the_findings(folder: Path) -> None:
    r = invoke("--only", "anomaly-detection", "--json", "--from", str(folder))
    assert [c["finding"] for c in json.loads(r.stdout)["changes"]] == ["anomaly-detection"]


def test_html_page_labels_each_hunk(folder: Path, tmp_path: Path) -> None:
    r = invoke("--from", str(folder), "--html", str(tmp_path / "fix.html"))
    assert r.exit_code == 0, r.output
    page = (tmp_path / "fix.html").read_text()
    assert "Content-Security-Policy" in page
    assert "dataloader-config" in page and "anomaly-detection" in page
    assert "predicted 5.00x (saves 20.0 of 25.0 ms per step)" in page
    assert "</script><b>" not in page  # the user's text is escaped
    # the two edits lie within three lines: one hunk, labelled with both changes
    assert page.count('class="hunk"') == 1
    hunk = page[page.index('class="hunk"') :]
    assert "<b>c1</b> dataloader-config" in hunk and "<b>c2</b> anomaly-detection" in hunk


def test_bad_input_is_one_line_and_exit_2(folder: Path) -> None:
    r = invoke("--from", "nowhere")
    assert r.exit_code == 2 and "torchdoctor: error:" in r.stderr and "Traceback" not in r.output
    r = invoke("--from", str(folder), "train.py")
    assert r.exit_code == 2 and "one of the two" in r.stderr
    r = invoke()
    assert r.exit_code == 2


def test_an_empty_patch_for_a_run_without_code_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = run_folder(tmp_path, [{"id": "graph-breaks", "evidence": {}}])
    r = invoke("--from", str(folder))
    assert r.exit_code == 0 and r.stdout == ""
    assert "nothing to change" in r.stderr


def test_the_printed_patch_applies_with_git_apply(folder: Path, tmp_path: Path) -> None:
    import shutil
    import subprocess

    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    r = invoke("--from", str(folder))
    (tmp_path / "fix.patch").write_text(r.stdout)
    before = Path("train.py").read_text()
    done = subprocess.run([git, "apply", "fix.patch"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    after = Path("train.py").read_text()
    assert after != before and "num_workers=2," in after
    compile(after, "train.py", "exec")
