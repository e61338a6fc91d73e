"""The seven trace findings moved into families (host, loading, waits): each one's registry
entry is binding. Moving its threshold moves where it fires, and the corpus traces it fired on
before the move still fire it (docs/architecture.md lists the outputs as byte-identical)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.conftest import corpus_file
from torchdoctor.analysis.bundle import TraceAnalysis, analyze_table
from torchdoctor.rules.families import FAMILY_RULES
from torchdoctor.rules.registry import REGISTRY
from torchdoctor.rules.spec import TraceRule
from torchdoctor.rules.trace_rules import family_finding
from torchdoctor.threshold import Threshold
from torchdoctor.trace.load import load_trace

RULES = {r.spec.id: r for r in FAMILY_RULES}
# finding -> a corpus trace it fires on
FIRES_ON = {
    "host-bound": "a100_ddp_convnet_nccl",
    "data-loading-bound": "v100_resnet50_train_workers0",
    "pageable-h2d-copies": "v100_resnet50_train_workers4",
    "dependency-waits": "mi300x_sglang_qwen3_8b_decode",
    "input-pipeline": "a100_event_sync_micro",
    "synchronous-copies": "v100_recsys_train_rank1",
    "low-gpu-utilization": "v100_resnet50_train_workers0",
}
_CACHE: dict[str, TraceAnalysis] = {}


def _analysis(stem: str) -> TraceAnalysis:
    if stem not in _CACHE:
        _CACHE[stem] = analyze_table(load_trace(corpus_file(stem)))
    return _CACHE[stem]


def _with_threshold(rule: TraceRule, value: float) -> TraceRule:
    spec = replace(rule.spec, threshold=Threshold(value, "moved by the test"))
    return TraceRule(spec, rule.measure, rule.below)


def test_the_moved_findings_are_family_rules_in_the_registry() -> None:
    for fid in FIRES_ON:
        assert fid in RULES, fid
        assert REGISTRY[fid] is RULES[fid].spec
        assert RULES[fid].measure.__module__.startswith("torchdoctor.rules.families.")


@pytest.mark.parametrize("fid", sorted(FIRES_ON))
def test_the_spec_threshold_decides(fid: str) -> None:
    rule, a = RULES[fid], _analysis(FIRES_ON[fid])
    f = family_finding(rule, a)
    assert f is not None and f.id == fid
    m = rule.measure(a)
    assert m is not None
    if rule.spec.threshold is None:  # any occurrence fires: nothing to move
        assert fid == "synchronous-copies" and m.value > 0
        return
    # just past the measured value, on the quiet side: the same measurement no longer fires
    quiet = m.value * 0.999 if rule.below else m.value * 1.001 + 1e-9
    assert family_finding(_with_threshold(rule, quiet), a) is None
    loud = m.value * 1.001 + 1e-9 if rule.below else m.value * 0.999
    assert family_finding(_with_threshold(rule, loud), a) is not None


def test_the_severity_cap_holds_whatever_the_share() -> None:
    # low utilisation on workers0: the data wait (a named cause) holds more idle time than
    # the short gaps between kernels, so the finding is recorded but stays info
    a = _analysis("v100_resnet50_train_workers0")
    f = family_finding(RULES["low-gpu-utilization"], a)
    data = family_finding(RULES["data-loading-bound"], a)
    assert f is not None and data is not None
    assert f.severity == "info" and data.saving_ms_per_step > f.saving_ms_per_step


def test_unexplained_time_in_pooling_points_at_channels_last() -> None:
    """A step far off the roofline in NCHW max pooling (9x slower than channels_last on one
    CPU) is told the memory format; one in a matmul is not."""
    from torchdoctor.rules.mode_fixes import unexplained_fix

    pool = unexplained_fix("torch ops", "infer.py:34", ["aten::max_pool2d", "aten::conv2d"])
    assert "model = model.to(memory_format=torch.channels_last)" in pool
    assert "aten::max_pool2d" in pool.splitlines()[0]
    mm = unexplained_fix("torch ops", "train.py:12", ["aten::addmm", "aten::relu"])
    assert "channels_last" not in mm and "torch.compile" in mm
