"""The inference engine family (``rules/families/serving.py``): eager decode waiting for
launches, host work between graph replays, a blocking copy per decode step, the prefill
chunk's size and decode's bandwidth; each fires on the synthetic engine steps of
``tests/core/test_core_graphs.py`` (or a corpus trace) and stays quiet on another kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.core.test_core_graphs import _eager_decode_step, _gemv_step, _item_step, _replay, write
from tests.core.test_core_serving import report
from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.rules.families import serving
from torchdoctor.rules.trace_rules import evaluate, family_finding

EAGER, BETWEEN, SYNC, PREFILL, MEMORY = serving.RULES


def _analysis(tmp_path: Path, name: str, events: list[dict[str, Any]]) -> TraceAnalysis:
    return analyze_path(write(tmp_path / name, events)).analysis


def _eager(tmp_path: Path) -> TraceAnalysis:
    events = [e for i in range(3) for e in _eager_decode_step(1000.0 * i, 100 * i)]
    return _analysis(tmp_path, "eager.json", events)


def test_eager_decode_waits_for_launches_and_replaces_host_bound(tmp_path: Path) -> None:
    a = _eager(tmp_path)
    f = family_finding(EAGER, a)
    assert f is not None and f.severity == "critical"
    assert f.title.startswith("Eager decode is launch bound: the GPU waits 0.7 ms per step (73%)")
    assert "--cuda-graph-max-bs 16" in f.fix
    ids = [x.id for x in evaluate(a)]
    assert "eager-decode-launch-bound" in ids and "host-bound" not in ids
    assert family_finding(BETWEEN, a) is None  # no graph replayed
    assert family_finding(SYNC, a) is None  # no blocking copy


def test_host_work_between_replays_fires_on_replayed_steps_only(tmp_path: Path) -> None:
    a = _analysis(tmp_path, "replay.json", _replay())
    f = family_finding(BETWEEN, a)
    assert f is not None and f.severity == "critical"
    assert f.evidence["share_of_step"] == pytest.approx(1335 / 2760, abs=1e-4)
    assert family_finding(EAGER, a) is None  # its steps replay a graph


def test_a_blocking_copy_per_decode_step(tmp_path: Path) -> None:
    events = [e for i in range(3) for e in _item_step(700.0 * i, 100 * i)]
    a = _analysis(tmp_path, "item.json", events)
    f = family_finding(SYNC, a)
    assert f is not None and f.where == ["gen.py(12): generate"]
    assert f.title.startswith("Blocking device-to-host copy per decode step: 1 per step")
    ids = [x.id for x in evaluate(a)]
    assert "synchronous-copies" not in ids and "sync-stalls" not in ids


def test_decode_bandwidth_is_measured_only_where_decode_moved_bytes(tmp_path: Path) -> None:
    events = [e for i in range(2) for e in _gemv_step(1000.0 * i, 100 + i)]
    f = family_finding(MEMORY, _analysis(tmp_path, "gemv.json", events))
    assert f is not None and f.title.startswith("Decode runs at 50% of memory bandwidth")
    assert family_finding(MEMORY, _eager(tmp_path)) is None  # no shapes recorded


def test_prefill_chunk_too_large_for_decode() -> None:
    a = report("mi300x_sglang_qwen3_8b_prefill_decode").analysis
    f = family_finding(PREFILL, a)
    assert f is not None and f.severity == "info" and f.saving_ms_per_step == 0.0
    assert f.title == (
        "Prefill chunk too large for interactive decode (about 2048 tokens fit in 100 ms): "
        "15360 tokens per step, 493.6 ms per step"
    )
    assert f.evidence["suggested_tokens"] == 2048


def test_no_prefill_step_no_chunk_finding(tmp_path: Path) -> None:
    assert family_finding(PREFILL, _eager(tmp_path)) is None
