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


# An object whose finaliser runs only in the interpreter's teardown (module globals cleared).
TEARDOWN_PROBE = """
import sys
class Probe:
    def __del__(self):
        sys.stderr.write("teardown ran\\n")
probe = Probe()
sys.argv = ["torchdoctor"] + sys.argv[1:]
from torchdoctor.cli import main
main()
"""


@pytest.mark.parametrize(
    ("args", "last_words", "teardown"),
    [
        (["--help"], "analyse it", False),  # the last command's line: the output is complete
        (["--version"], "torchdoctor, version", False),
        (["memory", "--help"], "Show this message and exit.", True),
    ],
)
def test_click_only_output_skips_the_interpreter_teardown(
    args: list[str], last_words: str, teardown: bool
) -> None:
    """``--help`` and ``--version`` leave through ``os._exit`` once their output is flushed (the
    teardown was a tenth of their instructions); once a subcommand starts, the teardown runs."""
    p = subprocess.run(
        [sys.executable, "-c", TEARDOWN_PROBE, *args], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    assert last_words in p.stdout.splitlines()[-1], p.stdout
    assert ("teardown ran" in p.stderr) is teardown, p.stderr
