"""``check`` on global modes and no-grad forwards planted away from the loop (tests/capture/cases,
written after the rules and never tuned on): determinism switched on in a seeding helper of
another module, oneDNN switched off by a configuration object's ``apply()`` in another module,
and an evaluation forward with grad inside a callback closure. Each finding points at the line
that does it (in the helper: the user's code), its remedy names that line, and its severity
agrees with its title: info only with the measured reason (within noise) or the reason it was
not measured, never a bare info beside a measured saving."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.capture.check_helpers import FAST, check_inprocess

CASES = Path(__file__).parent / "cases"

PLANTED = [
    ("determinism_in_helper.py", "deterministic-algorithms", "_repro.py", "use_deterministic"),
    ("onednn_off_by_config.py", "backend-disabled", "_runtime_config.py", "mkldnn.enabled ="),
    ("callback_val_forward.py", "grad-without-backward", "callback_val_forward.py", "planted"),
]


@pytest.fixture(autouse=True)
def global_modes_restored() -> Any:
    """The scripts run in this process and switch global modes: put them back afterwards."""
    import torch

    threads, mkldnn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    sys.path.insert(0, str(CASES))  # the scripts import their helper modules
    yield
    sys.path.remove(str(CASES))
    torch.use_deterministic_algorithms(False)
    torch.backends.mkldnn.enabled = mkldnn
    torch.set_num_threads(threads)


def line_of(name: str, text: str) -> str:
    lines = (CASES / name).read_text().splitlines()
    return f"{CASES / name}:{next(i for i, ln in enumerate(lines, 1) if text in ln)}"


@pytest.mark.slow
@pytest.mark.parametrize(("script", "fid", "helper", "text"), PLANTED)
def test_a_mode_set_in_a_helper_is_named_at_the_helpers_line(
    tmp_path: Path, script: str, fid: str, helper: str, text: str
) -> None:
    r = check_inprocess(tmp_path, CASES / script, "--steps", "40", opts=FAST)
    assert r.code == 0, r.stderr
    (f,) = [f for f in r.report["findings"] if f["id"] == fid]
    site = line_of(helper, text)
    assert f["where"] == [site]  # the helper's line, not the call in the loop
    assert f"# at {site}" in f["fix"]
    if f["severity"] == "info":
        assert "noise (info)" in f["title"] or "not measured: " in f["title"], f["title"]
        # the convolutions give oneDNN off an estimate: info only where the pairs rule it out
        assert fid != "backend-disabled" or "noise (info)" in f["title"], f["title"]
    else:
        assert "noise" not in f["title"] and f["saving_ms_per_step"] > 0
