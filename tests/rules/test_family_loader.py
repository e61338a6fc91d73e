"""The DataLoader family (``rules/families/loader.py``): the loader's settings when its batches
keep the step waiting (four wordings: more workers, persistent workers, fewer workers, pinned
memory only) and torch's own DataLoader warnings, from hand-written check records."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rules.run_records import lines, record
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


# -- a busy machine ---------------------------------------------------------------------------
FETCH = "torch:utils|_BaseDataLoaderIter.__next__"


def _busy_record(fetch_under: dict[str, float]) -> dict[str, Any]:
    """examples/unlisted/control_inference.py checked at load 17 (2 cores, other processes on
    1.75 of them): a 441.8 ms step, 34.6 ms of it in the loader's __next__ (5 batches, 0.1729 s),
    the line sampler's rows for the loop's line (the fetch) and the model's line."""
    fetch = {"site": "ci.py:44", "function": "main", "code": "for (x,) in DataLoader(...):",
             "self_ms": 35.1, "inclusive_ms": 35.1, "under": fetch_under,
             "calls": [[FETCH, 35.1]]}  # fmt: skip
    model = {"site": "ci.py:45", "function": "main", "code": "preds.append(model(x))",
             "self_ms": 432.6, "inclusive_ms": 432.6,
             "under": {"CPU contention": 380.22, "torch ops": 52.13, "Python": 0.23}}  # fmt: skip
    rec = record(
        step_ms=441.8,
        config={"dataloaders": [loader(0.1729, pin_memory=False)]},
        lines=lines([fetch, model], ms_per_step=467.68),
    )
    rec["steps"]["data_wait_ms"] = [12.7, 18.2, 62.1, 0.3, 0.6, 28.1, 32.0, 24.5]
    return rec


def test_a_wait_that_is_the_cpu_other_processes_held_is_info() -> None:
    """34.87 of the 35.1 ms sampled in the fetch the training thread waited for a core: 99.3%
    of the 34.58 ms wait is withheld, 0.23 ms is the loader's own, under the 0.5 ms gate."""
    (f,) = family_findings(CONFIG, RunRecord.from_dict(_busy_record(
        {"CPU contention": 34.87, "torch ops": 0.23})))  # fmt: skip
    assert f.severity == "info" and f.saving_ms_per_step == 0.0
    assert f.title == (
        "the step waits 34.6 ms (8%) for each batch (num_workers=0), 34.4 ms of it waiting for "
        "a CPU core other processes held: 0.23 ms is the loader's own"
    )
    assert f.fix.startswith("# nothing to change in the DataLoader: its batches take 0.23 ms")
    assert f.evidence["core_wait_ms_per_step"] == pytest.approx(34.35, abs=0.01)


def test_a_loader_that_costs_time_still_fires_on_a_busy_machine() -> None:
    """The same busy machine, but 24 of the 35.1 ms sampled in the fetch ran Python (items
    made one by one): 23.6 ms is the loader's own, 33% of the step net of its core wait
    (441.8 x (1 - 391.3 / 467.7) = 72.1 ms). The usual finding, with workers."""
    rec = _busy_record({"Python": 24.0, "CPU contention": 11.1})
    (f,) = family_findings(CONFIG, RunRecord.from_dict(rec))
    assert f.severity != "info" and f.saving_ms_per_step == pytest.approx(34.58)
    assert f.title == "the step waits 34.6 ms (8%) for each batch (num_workers=0)"
    assert "num_workers=" in f.fix


def test_the_traces_finding_merged_in_does_not_raise_a_withheld_wait() -> None:
    """check merges the trace's data-loading-bound (a warning: it sees only the 8% wait) into
    the run's finding, keeping the more severe; fitting it to the run puts it back to info."""
    import dataclasses

    from torchdoctor.capture.fit import fit_to_run

    busy = {"wall_s": 2.2, "cores": 2, "intra_op_threads": 2, "other_busy_cores": 1.75,
            "main_thread_runqueue_wait_s": 2.0}  # fmt: skip
    rec = _busy_record({"CPU contention": 34.87, "torch ops": 0.23})
    rec["cpu"] = busy
    (f,) = family_findings(CONFIG, RunRecord.from_dict(rec))
    merged = dataclasses.replace(f, severity="warning", saving_ms_per_step=34.5)
    (fitted,) = fit_to_run([merged], rec)
    assert fitted.severity == "info" and fitted.title == f.title
    trace_only = dataclasses.replace(merged, id="data-loading-bound", evidence={}, title="t")
    (fitted,) = fit_to_run([trace_only], rec)
    assert fitted.severity == "info"
    assert fitted.title == "t (34.4 ms of it waiting for a CPU core other processes held)"
    # the same wait made by the loader itself stays a warning
    own = _busy_record({"Python": 24.0, "CPU contention": 11.1})
    own["cpu"] = busy
    (fitted,) = fit_to_run([merged], own)
    assert fitted.severity == "warning"


def test_a_fetch_whose_intra_op_threads_waited_is_judged_by_its_fastest_batch() -> None:
    """control_inference.py again at load 15: of the 30.9 ms sampled in the fetch, 24.5 ms the
    training thread waited for a core and 5.9 ms it was counted in aten::index, which takes
    0.4 ms on free cores (its second intra-op thread waited for a core: 6.8 s of the threads'
    run-queue wait in a 2.3 s window). Net of the training thread's wait alone, 5.1 ms is left:
    7.5% of the step net of its core wait, a warning. Three of 24 fetches took 0.27-0.4 ms:
    a batch made in the training process costs no more than that when it gets the cores."""
    busy = {"wall_s": 2.28, "cores": 2, "intra_op_threads": 2, "other_busy_cores": 1.77,
            "main_thread_runqueue_wait_s": 2.0}  # fmt: skip
    rec = _busy_record({"CPU contention": 24.49, "torch ops": 5.91, "Python": 0.45})
    rec["config"]["dataloaders"][0]["usage"]["measured_wait_s"] = 0.1235  # 24.7 ms a step
    rec["steps"]["data_wait_ms"] = [16.9, 42.9, 26.2, 0.4, 47.7, 14.4, 37.9, 0.27, 28.0, 0.4]
    rec["cpu"] = busy
    (f,) = family_findings(CONFIG, RunRecord.from_dict(rec))
    assert f.severity == "info" and f.evidence["fastest_fetch_ms"] == 0.27
    assert f.title.endswith("24.4 ms of it waiting for a CPU core other processes held: 0.27 ms is the loader's own")  # fmt: skip
    # on free cores the fastest fetch says nothing (the same record without the busy CPUs)
    del rec["cpu"]
    (f,) = family_findings(CONFIG, RunRecord.from_dict(rec))
    assert f.severity != "info" and f.title.endswith("(num_workers=0)")
    # nor with workers: a prefetched batch is fast whatever it costs to make
    rec["cpu"] = busy
    rec["config"]["dataloaders"][0]["num_workers"] = 2
    (f,) = family_findings(CONFIG, RunRecord.from_dict(rec))
    assert f.severity != "info" and "fastest_fetch_ms" not in f.evidence


# -- items that wait, the fastest step, workers that keep up ------------------------------------
# examples/check/slow_dataloader.py checked at load 10 on 2 CPUs: the 1.5 ms sleep per item (16
# per batch) makes a batch in 39.8 ms in the training process, and a step's own work took 1.5 ms
# in the fastest step but 110 ms on average (other processes held the cores).
SLOW_STEPS = [291.5, 95.0, 401.5, 133.0, 36.9, 64.8, 58.0, 131.5, 35.8, 62.2, 50.1, 36.9]
SLOW_WAITS = [0.0, 29.6, 54.3, 31.7, 35.3, 37.3, 43.8, 40.0, 33.9, 38.9, 48.6, 35.3]


def _slow(on_cpu: float, **over: Any) -> dict[str, Any]:
    usage = {"main_process_batch": {"batch_ms": 39.85, "item_ms": 2.49, "on_cpu_share": on_cpu}}
    dl = loader(0.231, batch_size=16, cpus_per_rank=2, usage={**usage, **over.pop("usage", {})})
    rec = record(step_ms=156.4, config={"dataloaders": [{**dl, **over}]})
    rec["steps"].update(step_ms=SLOW_STEPS, data_wait_ms=SLOW_WAITS)
    return rec


def _code(fix: str) -> list[str]:
    return [ln for ln in fix.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_items_that_wait_get_workers_beyond_the_cpus_from_the_fastest_step() -> None:
    (f,) = family_findings(CONFIG, RunRecord.from_dict(_slow(on_cpu=0.08)))
    assert f.evidence["fastest_compute_ms"] == pytest.approx(1.5)
    # 2 x 39.85 ms / 1.5 ms = 54 workers wanted: WAITING_WORKERS_MAX, not the 2 CPUs
    assert f.evidence["suggested_num_workers"] == 16
    (call,) = _code(f.fix)
    assert "num_workers=16, persistent_workers=True, prefetch_factor=4" in call
    assert "92% of it waiting (I/O, a sleep)" in f.fix and "16 workers overlap" in f.fix
    # the same batch made by computing: workers only up to the CPUs (one per core)
    (f,) = family_findings(CONFIG, RunRecord.from_dict(_slow(on_cpu=0.95)))
    assert f.evidence["suggested_num_workers"] == 2 and "num_workers=2" in _code(f.fix)[0]


def test_workers_that_keep_up_leave_the_hand_off_as_info() -> None:
    """The paste applied (16 workers): a batch every 2.5 ms against 3 ms of compute in the
    fastest step; the 1.0 ms each step still waits is the hand-off, not a setting."""
    rec = _slow(0.08, num_workers=16, persistent_workers=True, prefetch_factor=4)
    rec["config"]["dataloaders"][0]["usage"]["measured_wait_s"] = 0.005  # 1 ms a step
    rec["config"]["dataloaders"][0]["explicit"] = {"prefetch_factor": "4"}
    rec["steps"].update(step_ms=[90.0, 4.0, 30.0, 4.1], data_wait_ms=[0.0, 1.0, 1.1, 1.0])
    rec["steps"]["mean_step_ms"] = 10.0
    (f,) = family_findings(CONFIG, RunRecord.from_dict(rec))
    assert f.severity == "info" and f.saving_ms_per_step == 0.0
    assert f.title == (
        "the step waits 1.0 ms for each batch from 16 workers that keep up (a batch about every "
        "2.5 ms against 3.0 ms of compute): the hand-off between processes"
    )
    assert _code(f.fix) == [] and "suggested_num_workers" not in f.evidence


def test_waiting_items_at_the_worker_cap_are_told_what_is_left_not_the_same_call() -> None:
    rec = _slow(0.08, num_workers=16, persistent_workers=True, prefetch_factor=4)
    rec["config"]["dataloaders"][0]["explicit"] = {"prefetch_factor": "4"}
    rec["config"]["dataloaders"][0]["usage"]["main_process_batch"]["batch_ms"] = 80.0
    (f,) = family_findings(CONFIG, RunRecord.from_dict(rec))  # a batch every 5 ms, 1.5 ms compute
    assert f.severity != "info" and f.evidence["suggested_num_workers"] == 16
    assert _code(f.fix) == []  # nothing the call does not already have
    assert f.fix.startswith("# num_workers=16 already: a batch costs 80.0 ms to make")
    assert "read each batch's items concurrently inside the dataset" in f.fix
    assert f.explanation.startswith("16 workers cannot keep up with items that wait")


def test_torchs_too_many_workers_warning_is_dropped_for_items_that_wait() -> None:
    many = (
        "This DataLoader will create 16 worker processes in total. Our suggested max number of "
        "worker in current system is 2, which is smaller than what this DataLoader is going to "
        "create. Please be aware that excessive worker creation might get DataLoader running slow."
    )
    probe = {"main_process_batch": {"batch_ms": 39.85, "item_ms": 2.49, "on_cpu_share": 0.08}}
    waiting = loader(0.0, num_workers=16, torch_warnings=[many], usage=probe)
    assert found(WARNINGS, waiting) == []
    probe["main_process_batch"]["on_cpu_share"] = 0.9  # items that compute: torch is right
    (f,) = found(WARNINGS, loader(0.0, num_workers=16, torch_warnings=[many], usage=probe))
    assert "num_workers=2" in f.fix


def test_workers_that_keep_up_but_wait_for_cores_are_info_after_the_traces_merge() -> None:
    """padded_text_loader.py with the pasted 16 workers at load 16 on 2 cores: the workers
    waited 116 ms for a core in the window against 7 ms running, and the step waited 50 ms on
    average (0.1 ms in its typical fetch). check merges the trace's data-loading-bound (critical:
    it sees only the wait) into the run's finding; fitting it to the run keeps it info."""
    import dataclasses

    from torchdoctor.capture.fit import fit_to_run

    rec = _slow(0.09, num_workers=16, persistent_workers=True, prefetch_factor=4)
    use = rec["config"]["dataloaders"][0]["usage"]
    use.update(measured_wait_s=0.251, window_worker_cpu_s=0.0067)
    use.update(window_worker_runqueue_wait_s=0.116, window_workers=16, window_s=0.2)
    rec["steps"].update(step_ms=[239.0, 38.7, 12.3, 12.1], data_wait_ms=[0.0, 1.1, 0.4, 0.1])
    rec["cpu"] = {"wall_s": 0.2, "cores": 2, "intra_op_threads": 1, "other_busy_cores": 1.6,
                  "main_thread_runqueue_wait_s": 0.07}  # fmt: skip
    (f,) = family_findings(CONFIG, RunRecord.from_dict(rec))
    assert f.severity == "info" and f.title.endswith(
        "the workers' waits for cores other processes held (116 ms in the window, against 7 ms "
        "running)"
    )
    assert f.fix.endswith("measure again where the cores are free")
    merged = dataclasses.replace(f, severity="critical", saving_ms_per_step=50.2)
    (fitted,) = fit_to_run([merged], rec)
    assert fitted.severity == "info" and fitted.saving_ms_per_step == 0.0


def test_items_that_wait_on_a_contended_machine_get_the_cap() -> None:
    """slow_dataloader.py at load 20: no step got free cores (the fastest took 71.5 ms of its
    own work; 1.1 ms minutes later), so the batch's cost over it asked for 5 workers, and the
    paste was told 16 next. Workers that wait hold no core: sized for the wait, the cap."""
    rec = _slow(0.098)
    rec["config"]["dataloaders"][0]["usage"]["main_process_batch"]["batch_ms"] = 156.0
    rec["steps"].update(step_ms=[1361.7, 206.1, 324.1], data_wait_ms=[0.0, 134.6, 252.6])
    (f,) = family_findings(CONFIG, RunRecord.from_dict(rec))
    assert f.evidence["suggested_num_workers"] == 5  # ceil(2 x 156 / 71.5) on free cores
    rec["cpu"] = {"wall_s": 3.45, "cores": 2, "intra_op_threads": 2, "other_busy_cores": 1.87,
                  "main_thread_runqueue_wait_s": 3.16}  # fmt: skip
    (f,) = family_findings(CONFIG, RunRecord.from_dict(rec))
    assert f.evidence["suggested_num_workers"] == 16 and "num_workers=16" in _code(f.fix)[0]
    rec["config"]["dataloaders"][0]["usage"]["main_process_batch"]["on_cpu_share"] = 0.9
    (f,) = family_findings(CONFIG, RunRecord.from_dict(rec))  # items that compute: the CPUs
    assert f.evidence["suggested_num_workers"] == 2


def test_computing_items_at_the_cpus_say_what_was_measured_and_nothing_already_set() -> None:
    """augmenting_dataset.py with the pasted 2 workers on 2 CPUs: each batch of 32 items still
    takes 102 ms to make, 97% of it on a CPU, against 1.5 ms of compute in the fastest step.
    The after-report says so (no 'unless items wait on I/O': they were measured computing) and
    proposes no argument the call already has."""
    rec = _slow(0.97, num_workers=2, persistent_workers=True, prefetch_factor=4, batch_size=32)
    dl = rec["config"]["dataloaders"][0]
    dl["explicit"] = {"prefetch_factor": "4"}
    dl["usage"]["main_process_batch"].update(batch_ms=102.2, item_ms=3.19)
    dl["usage"]["measured_wait_s"] = 0.15  # 30 ms a step
    rec["steps"].update(step_ms=[42.8, 2.2, 31.9, 27.4], data_wait_ms=[0.0, 0.1, 30.1, 25.9])
    (f,) = family_findings(CONFIG, RunRecord.from_dict(rec))
    assert f.severity != "info" and _code(f.fix) == []
    assert f.fix.startswith(
        "# num_workers=2 already uses this rank's 2 CPUs: its items compute (97% of a batch's "
        "102.2 ms on a CPU, against 1.5 ms of compute a step), so more workers will not help. "
        "Make each item cheaper (3.190 ms per item, measured)"
    )
