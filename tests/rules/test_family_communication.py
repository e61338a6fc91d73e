"""The communication family (``rules/families/communication.py``): collectives the step waits
for, on recorded corpus traces."""

from __future__ import annotations

from tests.rules.trace_cases import fire, threshold_decides


def test_exposed_communication_fires_on_ddp_and_the_threshold_decides() -> None:
    f = threshold_decides("exposed-communication", "a100_ddp_convnet_nccl")
    assert f.saving_ms_per_step > 0


def test_cpu_collectives_are_their_own_wording_and_one_gpu_is_quiet() -> None:
    gloo = fire("exposed-communication", "cpu_only_rank34")
    ddp = fire("exposed-communication", "a100_ddp_convnet_nccl")
    assert gloo is not None and ddp is not None and gloo.title != ddp.title
    assert fire("exposed-communication", "h100_bert_small_infer") is None
    assert fire("exposed-all-gather", "a100_ddp_convnet_nccl") is None  # DDP, not FSDP
