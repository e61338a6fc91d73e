"""What ``torchdoctor --help`` imports: click and the CLI's own small modules, nothing that a
command imports when it runs (start-up is paid by every command, and by a shell's completion)."""

from __future__ import annotations

import json
import subprocess
import sys

_LOADED = "import json, sys; print(json.dumps(sorted(sys.modules)))"
_HELP = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules))))
sys.argv = ["torchdoctor", "--help"]
from torchdoctor.cli import main
main()
"""


def _modules(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_help_imports_no_command_modules() -> None:
    added = _modules(_HELP) - _modules(_LOADED)
    assert "click" in added and "torchdoctor.cli" in added  # the probe saw the CLI start
    heavy = {"numpy", "msgspec", "torch", "rich", "pathlib", "urllib.parse", "ipaddress"}
    assert not added & heavy, sorted(added & heavy)
    ours = sorted(m for m in added if m.startswith("torchdoctor."))
    assert not [m for m in ours if m.split(".")[1] in {"analysis", "trace", "rules", "report"}]
