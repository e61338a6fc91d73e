"""``memory``'s first line is a verdict (what dominates the snapshot), and the report carries its
own definitions instead of pointing to a docs path a pip install does not have."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tests.memory import synth
from torchdoctor.cli import cli

MIB = 1 << 20


def _memory(*args: str) -> str:
    ran = CliRunner().invoke(cli, ["memory", *args])
    assert ran.exit_code == 0, ran.output
    return ran.output


def test_real_snapshot_verdict_names_the_optimizer_state(gpt_snapshot: Path) -> None:
    """The GPT snapshot: 2.86 GiB predates the history; of what it saw, the optimizer's step
    holds the most (442 + 147 + 147 MiB at optimizer.py:78, :74, :75)."""
    first = _memory(str(gpt_snapshot)).splitlines()[0]
    assert first.startswith("Verdict: peak allocated 3.59 GiB of 3.95 GiB reserved"), first
    assert "80% of it allocated before the recorded history" in first
    assert "optimizer state 736 MiB (20%) from 3 places, most at optimizer.py:78" in first
    doc = json.loads(_memory(str(gpt_snapshot), "--json"))
    v = doc["verdict"]
    assert v["dominant_kind"] == "optimizer state" and v["dominant_places"] == 3
    assert abs(v["dominant_bytes"] - (442 + 147 + 147) * MIB) < 2 * MIB
    assert v["text"] == first.removeprefix("Verdict: ")


def test_definitions_are_printed_not_a_docs_path(gpt_snapshot: Path) -> None:
    out = _memory(str(gpt_snapshot))
    assert "docs/memory.md" not in out
    assert "terms: reserved = obtained from the driver" in out
    assert "cached but unallocated = reserved - allocated" in out


def test_oom_verdict_leads_with_the_failed_request_and_the_fix(tmp_path: Path) -> None:
    path = synth.fragmented_oom(tmp_path / "oom.pickle")
    first = _memory(str(path)).splitlines()[0]
    assert first.startswith("Verdict: out of memory asking 256 MiB with 2 MiB free"), first
    assert "1 GiB cached but unallocated" in first
    assert "try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in first


def test_without_history_the_verdict_says_how_to_record_one(tmp_path: Path) -> None:
    blocks = [
        synth.block(1 << 40, 64 * MIB, "active_allocated"),
        synth.block((1 << 40) + 64 * MIB, 64 * MIB, "inactive"),
    ]
    path = synth.write(tmp_path / "nohist.pickle", [synth.segment(1 << 40, blocks)], [[]])
    first = _memory(str(path)).splitlines()[0]
    assert first.startswith("Verdict: reserved 128 MiB, allocated 64 MiB"), first
    assert "_record_memory_history()" in first
