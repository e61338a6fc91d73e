"""The syncs family (``rules/families/syncs.py``): the CPU blocking on the device until its
queue drains, on recorded corpus traces."""

from __future__ import annotations

from dataclasses import replace

from tests.rules.trace_cases import RULES, analysis, fire, threshold_decides
from torchdoctor.rules.spec import Gate, TraceRule
from torchdoctor.rules.trace_rules import family_finding
from torchdoctor.threshold import Threshold


def test_sync_stalls_fire_on_an_inference_loop_and_the_threshold_decides() -> None:
    f = threshold_decides("sync-stalls", "h100_bert_small_infer")
    assert "cudaStreamSynchronize" in f.where  # the blocking calls are named


def test_sync_stalls_are_quiet_without_blocking_calls_and_below_the_gate() -> None:
    assert fire("sync-stalls", "v100_ddp_convnet_ns_timestamps") is None
    # the gate: a stall must also last long enough per step (0.59 ms here)
    rule, a = RULES["sync-stalls"], analysis("h100_bert_small_infer")
    m = rule.measure(a)
    assert m is not None
    longer = Gate("ms", Threshold(m.gates["ms"] * 1.01, "moved by the test"))
    gated = TraceRule(replace(rule.spec, gates=(longer,)), rule.measure, rule.below)
    assert family_finding(gated, a) is None
