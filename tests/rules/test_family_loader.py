"""The DataLoader family (``rules/families/loader.py``): the loader's settings when its batches
keep the step waiting (four wordings: more workers, persistent workers, fewer workers, pinned
memory only) and torch's own DataLoader warnings, from hand-written check records."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rules.run_records import record
from torchdoctor.record.run import RunRecord
from torchdoctor.rules.families import loader as ld
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.run_common import family_findings

CONFIG, WARNINGS = ld.RULES
GPU = {"device": {"name": "NVIDIA H200"}, "memory": {"total_bytes": 80 * 2**30}}


def loader(wait_s: float, **over: Any) -> dict[str, Any]:
    """A loader that fed the 5 measured steps, waiting ``wait_s`` in all."""
    usage = {"measured_batches": 5, "measured_wait_s": wait_s, **over.pop("usage", {})}
    return {
        "num_workers": 0,
        "pin_memory": True,
        "batch_size": 32,
        "cpus_per_rank": 4,
        "explicit": {"batch_size": "32"},
        "usage": usage,
        **over,
    }


def found(rule: Any, *loaders: dict[str, Any], **sections: Any) -> list[Finding]:
    rec = record(config={"dataloaders": list(loaders)}, **sections)
    return family_findings(rule, RunRecord.from_dict(rec))


def test_a_loader_without_workers_that_keeps_the_step_waiting_gets_workers() -> None:
    (f,) = found(CONFIG, loader(0.1))  # 20 ms of each 100 ms step
    assert f.id == "dataloader-config" and f.saving_ms_per_step == pytest.approx(20.0)
    assert f.title == "the step waits 20.0 ms (20%) for each batch (num_workers=0)"
    assert f.explanation.startswith("num_workers=0 loads every batch in the training process")
    assert f.explanation.endswith(
        "Worker processes prepare the next batches while the model trains."
    )
    assert "num_workers=" in f.fix and f.evidence["suggested_num_workers"] >= 1


def test_a_small_wait_is_quiet_unless_a_cuda_run_lacks_pinned_memory() -> None:
    assert found(CONFIG, loader(0.02)) == []  # 4 ms: under DATA_WAIT_SHARE (5%)
    (pin,) = found(CONFIG, loader(0.02, pin_memory=False), gpu=GPU)
    assert pin.title.startswith("DataLoader without pin_memory on a CUDA run")
    assert pin.saving_ms_per_step == 0.0 and "pin_memory=True" in pin.fix
    assert found(CONFIG, loader(0.02, pin_memory=False)) == []  # a CPU run: nothing to pin


def test_workers_started_every_epoch_get_persistent_workers() -> None:
    restarts = {"measured_first_batches": 2, "measured_iter_s": 0.01, "measured_first_wait_s": 0.07}
    (f,) = found(CONFIG, loader(0.1, num_workers=2, usage=restarts))
    # 80 ms of start-up over 5 steps: 16 ms a step, most of the 20 ms wait
    assert f.title.startswith("DataLoader workers start again every epoch: 16.0 ms per step (16%)")
    assert f.saving_ms_per_step == pytest.approx(16.0) and "persistent_workers=True" in f.fix
    assert f.explanation.startswith("Without persistent_workers")


def test_idle_workers_slower_than_the_training_process_get_none() -> None:
    idle = {
        "main_process_batch": {"batch_ms": 2.0, "item_ms": 0.06},
        "window_workers": 2,
        "window_s": 1.0,
        "window_worker_cpu_s": 0.2,
    }
    (f,) = found(CONFIG, loader(0.1, num_workers=2, usage=idle))
    assert f.title == (
        "the step waits 20.0 ms for each batch from 2 workers, busy 10% of the time, but making "
        "a batch in the training process takes 2.00 ms (measured): fewer workers"
    )
    assert f.saving_ms_per_step == pytest.approx(18.0) and "num_workers" not in f.fix.split("#")[0]


def test_torch_warnings_with_a_known_fix_are_a_finding_each() -> None:
    many = (
        "This DataLoader will create 8 worker processes in total. Our suggested max number of "
        "worker in current system is 2, which is smaller than what this DataLoader is going to "
        "create. Please be aware that excessive worker creation might get DataLoader running slow."
    )
    warned = loader(0.0, num_workers=8, torch_warnings=[many, "some other warning"])
    (f,) = found(WARNINGS, warned)
    assert f.id == "torch-warning" and f.severity == "info" and "num_workers=2" in f.fix
    assert f.title.startswith("torch warned: This DataLoader will create 8 worker processes")
    assert f.title.endswith("which is smaller than what this DataLoader is going to create.")
    assert found(WARNINGS, loader(0.0)) == []
