"""The host family (``rules/families/host.py``): the device idle before the CPU launched the
next work, on recorded corpus traces."""

from __future__ import annotations

from tests.rules.trace_cases import fire, threshold_decides


def test_host_bound_fires_on_a_launch_bound_ddp_step_and_its_threshold_decides() -> None:
    f = threshold_decides("host-bound", "a100_ddp_convnet_nccl")
    assert f.saving_ms_per_step > 0 and f.share_of_step > 0.1  # HOST_IDLE_SHARE, 10% of the step


def test_host_bound_is_quiet_where_the_device_never_waits_for_launches() -> None:
    assert fire("host-bound", "cpu_only_rank34") is None  # no device at all
    assert fire("host-bound", "v100_ddp_convnet_ns_timestamps") is None
