"""Run folders: unique names, one folder shared by the ranks of a job, waiting for ranks."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from torchdoctor.capture.runfolder import (
    RankInfo,
    create_run_folder,
    rank_result_path,
    release_pointer,
    trace_path,
    wait_for_ranks,
    write_json,
)
from torchdoctor.errors import UserError


def test_single_process_layout(tmp_path: Path) -> None:
    a = create_run_folder(str(tmp_path), "dir/train.py", RankInfo())
    b = create_run_folder(str(tmp_path), "dir/train.py", RankInfo())
    assert a != b and a.name.startswith("train-") and b.name.startswith(a.name)
    assert rank_result_path(a, RankInfo()) == a / "run.json"
    assert trace_path(a, RankInfo()) == a / "trace.json.gz"


def test_ranks_share_one_folder(tmp_path: Path) -> None:
    env = {"MASTER_PORT": "29500", "TORCHELASTIC_RESTART_COUNT": "0"}
    r0, r1 = RankInfo(0, 0, 2), RankInfo(1, 1, 2)
    found: list[Path] = []
    # rank 1 starts first and waits for local rank 0's pointer
    t = threading.Thread(
        target=lambda: found.append(create_run_folder(str(tmp_path), "t.py", r1, env))
    )
    t.start()
    time.sleep(0.2)
    folder = create_run_folder(str(tmp_path), "t.py", r0, env)
    t.join(5)
    assert found == [folder]
    assert trace_path(folder, r1) == folder / "traces" / "rank1.json.gz"
    assert rank_result_path(folder, r1) == folder / "ranks" / "rank1.json"
    release_pointer(str(tmp_path), r0, env)
    assert not list(tmp_path.glob(".pending-*"))


def test_wait_for_ranks_returns_what_arrived(tmp_path: Path) -> None:
    write_json(tmp_path / "ranks" / "rank0.json", {"rank": 0})
    start = time.monotonic()
    got = wait_for_ranks(tmp_path, 3, timeout_s=0.3)
    assert got == {0: {"rank": 0}} and time.monotonic() - start >= 0.3
    write_json(tmp_path / "ranks" / "rank1.json", {"rank": 1})
    write_json(tmp_path / "ranks" / "rank2.json", {"rank": 2})
    assert sorted(wait_for_ranks(tmp_path, 3, timeout_s=5)) == [0, 1, 2]


def test_rank_env() -> None:
    r = RankInfo.from_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"})
    assert (r.rank, r.local_rank, r.world_size, r.distributed) == (3, 1, 4, True)
    assert not RankInfo.from_env({}).distributed
    with pytest.raises(UserError):
        RankInfo.from_env({"RANK": "x"})
