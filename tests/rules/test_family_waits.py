"""The waits family (``rules/families/waits.py``): kernels waiting on other streams, late
input, blocking copies and a device busy too little of the step, on recorded corpus traces."""

from __future__ import annotations

import dataclasses

import pytest

from tests.rules.trace_cases import fire, threshold_decides

FIRES_ON = {
    "dependency-waits": "mi300x_sglang_qwen3_8b_decode",
    "input-pipeline": "a100_event_sync_micro",
    "synchronous-copies": "v100_recsys_train_rank1",
    "low-gpu-utilization": "v100_resnet50_train_workers0",
}


@pytest.mark.parametrize("fid", sorted(FIRES_ON))
def test_the_spec_threshold_decides(fid: str) -> None:
    threshold_decides(fid, FIRES_ON[fid])


def test_quiet_where_nothing_waits() -> None:
    for fid in FIRES_ON:
        assert fire(fid, "v100_ddp_convnet_ns_timestamps") is None, fid


def test_the_severity_cap_holds_whatever_the_share() -> None:
    # low utilisation on workers0: the data wait (a named cause) holds more idle time than
    # the short gaps between kernels, so the finding is recorded but stays info
    f = fire("low-gpu-utilization", "v100_resnet50_train_workers0")
    data = fire("data-loading-bound", "v100_resnet50_train_workers0")
    assert f is not None and data is not None
    assert f.severity == "info" and data.saving_ms_per_step > f.saving_ms_per_step


def test_an_input_wait_under_a_workers_hand_over_stays_quiet() -> None:
    """The input-pipeline gate: a wait smaller than what handing a batch over from a worker
    costs (DATA_WAIT_MIN_MS) is the loop's own glue, not a pipeline a worker could remove."""
    from tests.rules.trace_cases import RULES, analysis, family_finding, with_threshold
    from torchdoctor.rules.spec import Gate
    from torchdoctor.rules.thresholds import DATA_WAIT_MIN_MS
    from torchdoctor.threshold import Threshold

    rule, a = RULES["input-pipeline"], analysis("a100_event_sync_micro")
    m = rule.measure(a)
    assert m is not None and m.gates["ms"] >= DATA_WAIT_MIN_MS  # fires as recorded
    assert family_finding(rule, a) is not None
    gate = rule.spec.gates[0]
    assert gate.minimum is DATA_WAIT_MIN_MS
    raised = dataclasses.replace(
        rule.spec, gates=(Gate(gate.key, Threshold(m.gates["ms"] * 1.01, "t")),)
    )
    assert family_finding(type(rule)(raised, rule.measure, rule.below), a) is None
    assert family_finding(with_threshold(rule, m.value * 0.999), a) is not None
