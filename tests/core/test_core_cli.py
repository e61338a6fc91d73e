"""The CLI: analyze never imports torch, works where torch is absent, and --json is clean JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import corpus_file

# Makes `import torch` fail inside the child, as on a machine without torch.
NO_TORCH = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is not installed here")
        return None
sys.meta_path.insert(0, Block())
sys.argv = ["torchdoctor"] + sys.argv[1:]
from torchdoctor.cli import main
main()
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, timeout=120
    )


def test_analyze_runs_without_torch() -> None:
    p = _run("analyze", str(corpus_file("h100_bert_small_infer")), "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # stdout holds the JSON and nothing else
    assert doc["findings"][0]["id"] == "host-bound"


def test_help_and_version_without_torch() -> None:
    p = _run("--help")
    assert p.returncode == 0 and "analyze" in p.stdout and "tune" in p.stdout
    p = _run("--version")
    assert p.returncode == 0 and "torchdoctor" in p.stdout


@pytest.mark.slow
def test_text_report_without_torch() -> None:
    p = _run("analyze", str(corpus_file("v100_resnet50_train_workers0")), "--top", "3")
    assert p.returncode == 0, p.stderr
    assert "Verdict:" in p.stdout and "data loading" in p.stdout


def test_missing_file_is_one_line_and_exit_2() -> None:
    p = _run("analyze", "/nonexistent/trace.json.gz")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "no such file" in p.stderr
