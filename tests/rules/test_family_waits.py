"""The waits family (``rules/families/waits.py``): kernels waiting on other streams, late
input, blocking copies and a device busy too little of the step, on recorded corpus traces."""

from __future__ import annotations

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
