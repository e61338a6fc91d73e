"""The DataLoader finding names the loader that fed the measured steps and the change that
removes its measured wait: persistent workers for restarts, fewer workers when they idle and a
batch is cheaper to make in the training process, the measured item cost otherwise; torch's own
DataLoader warnings become findings."""

from __future__ import annotations

import time
import types
from pathlib import Path
from typing import Any

import pytest

from tests.capture.check_helpers import EXAMPLES, check_inprocess
from torchdoctor.rules.run_rules import run_findings


def record(loaders: list[dict[str, Any]], wait_ms: float = 8.0) -> dict[str, Any]:
    return {
        "exit": {"status": "stopped"},
        "steps": {
            "count": 8,
            "measured_steps": 5,
            "mean_step_ms": 10.0,
            "mean_data_wait_ms": wait_ms,
        },
        "config": {"dataloaders": loaders},
    }


def loader(**over: Any) -> dict[str, Any]:
    base = {
        "num_workers": 2,
        "pin_memory": False,
        "persistent_workers": False,
        "batch_size": 32,
        "cpus_per_rank": 2,
        "explicit": {"batch_size": "32"},
        "usage": {
            "measured_batches": 5,
            "measured_wait_s": 0.04,
            "measured_iters": 0,
            "measured_first_batches": 0,
        },
    }
    return {**base, **over}


def dl_finding(rec: dict[str, Any]) -> Any:
    (f,) = [f for f in run_findings(rec) if f.id == "dataloader-config"]
    return f


def test_restarted_workers_get_persistent_workers() -> None:
    use = {
        "measured_batches": 5,
        "measured_wait_s": 0.04,
        "measured_iters": 2,
        "measured_iter_s": 0.002,
        "measured_first_batches": 2,
        "measured_first_wait_s": 0.036,
    }
    f = dl_finding(record([loader(usage=use, multiprocessing_context="spawn")]))
    assert "start again every epoch" in f.title
    # the recorded call does not pass its workers: they are stated, persistent_workers needs them
    assert "persistent_workers=True" in f.fix and "num_workers=2" in f.fix
    assert "cheaper" not in f.fix
    assert f.saving_ms_per_step == pytest.approx(7.6)  # (2 + 36) ms over 5 steps


class _Sleeps:
    """Items that wait (a read from a slow disk, a remote store): 1 ms asleep each."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> int:
        time.sleep(0.001)
        return i


class _Computes(_Sleeps):
    """Items that compute for about as long, in Python."""

    def __getitem__(self, i: int) -> int:
        return sum(k * i % 7 for k in range(20_000))


class _Rows(_Sleeps):
    """Items that cost microseconds (rows of a list)."""

    def __getitem__(self, i: int) -> int:
        return i


def test_the_in_process_batch_says_whether_its_items_wait_or_compute() -> None:
    """The share of a batch's time its thread ran, net of its waits for a core: near 0 for
    items that sleep, near 1 for items that compute, on a loaded machine too (at load 23 on 2
    cores: 0.03 and 1.0)."""
    from torchdoctor.capture.loader_probe import time_batches

    def probe(ds: _Sleeps) -> dict[str, Any]:
        got = time_batches(types.SimpleNamespace(dataset=ds, batch_size=8, collate_fn=None))
        assert got is not None and got["items"] == got["batches"] * 8
        return got

    assert probe(_Sleeps())["on_cpu_share"] < 0.3
    assert probe(_Computes())["on_cpu_share"] > 0.7
    # a batch of microseconds (idle_workers.py's rows: 0.1 ms) read 0.0 from the scheduler's
    # run counter, which lags up to a tick for the running thread; the thread's CPU clock does not
    assert probe(_Rows())["on_cpu_share"] > 0.7


def test_restarted_workers_whose_batch_is_cheaper_than_a_hand_off_get_none() -> None:
    """spawn_workers_restart.py: two spawned workers started every epoch for two batches of
    tensor rows that take 0.12 ms to make in the training process. persistent_workers keeps the
    workers, but each batch still pays its hand-off (the paste left the step waiting); without
    workers nothing is handed over or started. The printed call runs as printed."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    use = {
        "measured_batches": 5,
        "measured_wait_s": 0.04,
        "measured_iters": 2,
        "measured_iter_s": 0.002,
        "measured_first_batches": 2,
        "measured_first_wait_s": 0.036,
        "main_process_batch": {"batch_ms": 0.12, "item_ms": 0.004},
    }
    call = {
        "site": "/p/spawn_workers_restart.py:11",
        "func": "DataLoader",
        "args": ["data"],
        "kwargs": {
            "batch_size": "32",
            "shuffle": "True",
            "num_workers": "2",
            "multiprocessing_context": '"spawn"',
        },
    }
    f = dl_finding(record([loader(usage=use, multiprocessing_context="spawn", call=call)]))
    assert "start again every epoch" in f.title and f.evidence["suggested_num_workers"] == 0
    assert f.saving_ms_per_step == pytest.approx(8.0 - 0.12)
    code = f.fix.splitlines()[0].split("  # at ")[0]
    assert code == "DataLoader(data, batch_size=32, shuffle=True)"
    data = TensorDataset(torch.randn(64, 32), torch.randint(0, 4, (64,)))
    batches = list(eval(code, {"DataLoader": DataLoader, "data": data}))
    assert len(batches) == 2 and batches[0][0].shape == (32, 32)


def test_idle_workers_and_a_cheap_batch_get_fewer_workers() -> None:
    use = {
        **loader()["usage"],
        "window_workers": 4,
        "window_s": 0.05,
        "window_worker_cpu_s": 0.004,
        "window_worker_runqueue_wait_s": 0.002,
        "window_batches": 5,
        # a batch this cheap is no wait to overlap, whatever its on-CPU share reads
        "main_process_batch": {"batch_ms": 0.4, "item_ms": 0.0125, "on_cpu_share": 0.0},
    }
    f = dl_finding(record([loader(num_workers=4, usage=use, persistent_workers=True)]))
    assert "num_workers" not in f.fix.splitlines()[0] and "fewer workers" in f.title
    assert f.saving_ms_per_step == pytest.approx(7.6)  # the wait minus the measured batch


TOO_MANY = (
    "This DataLoader will create 4 worker processes in total. Our suggested max number of worker "
    "in current system is 2, which is smaller than what this DataLoader is going to create."
)


def test_torchs_worker_count_defers_to_the_measured_one_for_the_same_loader() -> None:
    """idle_workers.py's facts: 4 idle workers on 2 CPUs, a batch of 0.4 ms in the training
    process, and torch's warning that 2 workers are the most: one count for the loader, the
    measured one (no workers), with torch's warning in its evidence; not torch's num_workers=2."""
    use = {
        **loader()["usage"],
        "window_workers": 4,
        "window_s": 0.05,
        "window_worker_cpu_s": 0.004,
        "main_process_batch": {"batch_ms": 0.4, "item_ms": 0.0125, "on_cpu_share": 0.9},
    }
    idle = loader(num_workers=4, usage=use, persistent_workers=True, torch_warnings=[TOO_MANY])
    found = {f.id: f for f in run_findings(record([idle]))}
    assert "torch-warning" not in found
    f = found["dataloader-config"]
    assert f.evidence["suggested_num_workers"] == 0 and f.evidence["torch_warning"] == TOO_MANY
    assert "num_workers" not in f.fix.splitlines()[0]
    # no wait to remove: torch's warning is the loader's one finding, with its count
    quiet = {**idle, "usage": {**use, "measured_wait_s": 0.0}}
    (warned,) = run_findings(record([quiet], 0.0))
    assert warned.id == "torch-warning" and "num_workers=2" in warned.fix


def test_busy_workers_at_the_cpu_count_quote_the_measured_item_cost() -> None:
    use = {
        **loader()["usage"],
        "window_workers": 2,
        "window_s": 0.05,
        "window_worker_cpu_s": 0.095,
        "window_worker_runqueue_wait_s": 0.0,
        "window_batches": 5,
        "main_process_batch": {"batch_ms": 30.0, "item_ms": 0.9375},
    }
    f = dl_finding(record([loader(usage=use, persistent_workers=True)]))
    assert "0.938 ms per item, measured" in f.fix
    assert "about" not in f.fix  # not the step-time estimate


def test_the_loader_that_fed_the_measured_steps_is_the_one_named() -> None:
    val = loader(num_workers=0, batch_size=64, usage={"measured_batches": 0, "measured_wait_s": 0})
    train = loader(
        num_workers=0,
        batch_size=16,
        call={
            "site": "/p/t.py:20",
            "func": "DataLoader",
            "args": ["Slow()"],
            "kwargs": {"batch_size": "16"},
        },
    )
    f = dl_finding(record([val, train]))
    assert f.fix.startswith("DataLoader(Slow(), batch_size=16")


def test_one_cpu_per_rank_never_suggests_two_workers() -> None:
    f = dl_finding(record([loader(num_workers=0, cpus_per_rank=1, usage={})]))
    assert "num_workers=1" in f.fix


def test_torch_warnings_become_findings_with_the_fix_they_ask_for() -> None:
    text = (
        "This DataLoader will create 4 worker processes in total. Our suggested max number "
        "of worker in current system is 2, which is smaller than what this DataLoader is "
        "going to create. Please be aware that excessive worker creation might get ..."
    )
    pin = (
        "'pin_memory' argument is set as true but no accelerator is found, then device "
        "pinned memory won't be used."
    )
    explicit = {"batch_size": "32", "pin_memory": "True"}
    quiet = {"measured_batches": 5, "measured_wait_s": 0.0}  # no wait: no dataloader-config
    warned = loader(torch_warnings=[text, pin], pin_memory=True, explicit=explicit, usage=quiet)
    rec = record([warned], 0.0)
    found = [f for f in run_findings(rec) if f.id == "torch-warning"]
    assert len(found) == 2
    assert "suggested max number of worker" in found[0].title and "num_workers=2" in found[0].fix
    assert "pin_memory" not in found[1].fix.splitlines()[0]  # dropped, not set to its default


@pytest.mark.slow
def test_check_names_the_training_loader_not_the_first_built(tmp_path: Path) -> None:
    r = check_inprocess(tmp_path, EXAMPLES / "two_loaders.py")
    assert r.code == 0, r.stderr
    (f,) = [f for f in r.report["findings"] if f["id"] == "dataloader-config"]
    assert "DataLoader(Slow(), batch_size=16, shuffle=True" in f["fix"], f["fix"]
    assert "two_loaders.py:20" in f["fix"]


@pytest.mark.slow
def test_check_idle_workers_get_fewer_workers_and_the_warning(tmp_path: Path) -> None:
    r = check_inprocess(
        tmp_path, EXAMPLES / "idle_workers.py", opts=["--warmup", "3", "--steps", "5"]
    )
    assert r.code == 0, r.stderr
    found = {f["id"]: f for f in r.report["findings"]}
    use = r.run["config"]["dataloaders"][0]["usage"]
    main = use.get("main_process_batch")
    # a batch is timed in-process only when the measured wait was worth it (DATA_WAIT_MIN_MS);
    # the advice to use no workers rests on that timing
    if main is not None:
        assert main["item_ms"] < 0.5  # microseconds, not milliseconds
    if main is not None and "dataloader-config" in found:  # the wait depends on the machine
        assert "no workers" in found["dataloader-config"]["fix"]
        assert "cheaper" not in found["dataloader-config"]["fix"]
    config = found.get("dataloader-config", {}).get("evidence", {})
    if config.get("suggested_num_workers") == 0:
        # one count for the loader: the measured one, torch's warning in its evidence
        assert "torch-warning" not in found and "worker processes" in config["torch_warning"]
    else:
        assert (
            "num_workers=2" in found["torch-warning"]["fix"]
            or r.run["config"]["dataloaders"][0]["cpu_count"] >= 4
        )


@pytest.mark.slow
def test_check_spawn_workers_restarted_each_epoch(tmp_path: Path) -> None:
    # no clean window: every two steps start two spawned workers that import torch again, and
    # the profiled steps are what the finding reads (5 steps instead of 19: ~4x less time)
    opts = ["--warmup", "1", "--clean-steps", "0", "--steps", "4"]
    r = check_inprocess(tmp_path, EXAMPLES / "spawn_workers_restart.py", opts=opts)
    assert r.code == 0, r.stderr
    (f,) = [f for f in r.report["findings"] if f["id"] == "dataloader-config"]
    assert "start again every epoch" in f["title"] and "cheaper" not in f["fix"]
    call = f["fix"].splitlines()[0]
    if f["evidence"].get("suggested_num_workers") == 0:
        # a batch of tensor rows cheaper to make here than a hand-off: no workers at all, and
        # no spawn context (DataLoader raises for one without workers)
        assert f["evidence"]["main_process_batch_ms"] < 0.5
        for gone in ("num_workers", "persistent_workers", "multiprocessing_context"):
            assert gone not in call
    else:
        assert "persistent_workers=True" in call
