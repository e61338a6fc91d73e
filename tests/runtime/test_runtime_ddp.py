"""DDP for real: two processes under torchrun with gloo. Parameters agree across ranks and with
one process over the same global batch; accumulation all-reduces once per optimizer step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import runtime_ddp_worker as worker  # noqa: E402


def _single_process(global_batch: int, steps: int) -> list[torch.Tensor]:
    # DistributedSampler(shuffle=False) gives rank r samples r, r+2, ...: each optimizer step
    # covers dataset[k*global_batch : (k+1)*global_batch] across the two ranks.
    data = worker.dataset()
    net = worker.model()
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    for k in range(steps):
        x = torch.stack([d[0] for d in data[k * global_batch : (k + 1) * global_batch]])
        y = torch.stack([d[1] for d in data[k * global_batch : (k + 1) * global_batch]])
        F.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().flatten() for p in net.parameters()]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    out = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(HERE / "runtime_ddp_worker.py"),
        str(out),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    if proc.returncode != 0 and "terminate called without an active exception" in proc.stderr:
        # Seen in 2 of 4 full-suite runs on a 2-CPU machine (never alone, 0 of 6): a gloo rank
        # aborts in its C++ teardown at exit. Not understood yet; one retry, so that the checks
        # below still run on real ranks.
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def _close(a: object, b: list[torch.Tensor]) -> bool:
    return all(torch.allclose(torch.tensor(x), y, atol=1e-6) for x, y in zip(a, b, strict=True))  # type: ignore[call-overload]


@pytest.mark.slow
def test_process_group_and_rank_zero_logging(ranks: list[dict[str, object]]) -> None:
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world_size"] for r in ranks} == {2}
    assert {r["backend"] for r in ranks} == {"gloo"} and all(r["created_here"] for r in ranks)
    assert ranks[0]["log_records"] > 0 and ranks[1]["log_records"] == 0  # type: ignore[operator]
    assert all(r["group_destroyed_at_exit"] for r in ranks)
    # ddp_bucket_cap_mb reaches DDP (set to 1 + accumulation in the two runs).
    assert (ranks[0]["bucket_bytes_cap_1"], ranks[0]["bucket_bytes_cap_2"]) == (
        2 * 2**20,
        3 * 2**20,
    )


@pytest.mark.slow
def test_ranks_agree_and_match_single_process(ranks: list[dict[str, object]]) -> None:
    assert ranks[0]["params"] == ranks[1]["params"]
    assert _close(ranks[0]["params"], _single_process(global_batch=8, steps=3))
    assert not _close(
        ranks[0]["params"], [p.detach().flatten() for p in worker.model().parameters()]
    )
    assert ranks[0]["allreduce_calls"] == 3  # one bucket, one all-reduce per step


@pytest.mark.slow
def test_accumulation_skips_inner_allreduce(ranks: list[dict[str, object]]) -> None:
    assert ranks[0]["accum_params"] == ranks[1]["accum_params"]
    # 2 ranks x 2 micro-batches x 4 samples: each step is one batch of 16 in a single process.
    assert _close(ranks[0]["accum_params"], _single_process(global_batch=16, steps=2))
    assert ranks[0]["accum_allreduce_calls"] == 2  # no_sync on the inner micro-batches
