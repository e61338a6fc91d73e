"""A loader finding on a machine whose cores other processes held (``capture/fit.py``): where
the typical step waited under the 0.5 ms gate, the mean wait is a few fetches preempted for
tens of ms, and the finding is info, not a warning on a healthy loop (examples/unlisted's
``control_inference.py`` under load: 0.4 ms in most steps, 12.5 ms on average)."""

from __future__ import annotations

from typing import Any

from torchdoctor.capture.fit import fit_to_run
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.registry import spec

STARVED = {"wall_s": 0.72, "intra_op_threads": 1, "cores": 2, "other_busy_cores": 1.83,
           "main_thread_runqueue_wait_s": 0.65}  # fmt: skip
SPIKY = [12.5, 0.3, 0.6, 0.4, 0.4, 18.0, 0.4, 0.3, 30.3, 0.4, 44.1, 0.4, 35.9, 47.9, 0.3]


def _loader(evidence: dict[str, Any] | None = None) -> Finding:
    s = spec("dataloader-config")
    return Finding(
        "dataloader-config", "the step waits 12.5 ms (5%) for each batch (num_workers=0)",
        "warning", 12.5, 0.05, evidence or {}, "DataLoader(data, num_workers=2)",
        s.explanation, s.doc_url, where=[],
    )  # fmt: skip


def _record(waits: list[float], cpu: dict[str, Any]) -> dict[str, Any]:
    return {"steps": {"step_ms": [240.0] * len(waits), "data_wait_ms": waits}, "cpu": cpu}


def test_a_spiky_wait_on_a_starved_machine_is_info() -> None:
    (f,) = fit_to_run([_loader()], _record(SPIKY, STARVED))
    assert f.severity == "info"
    assert f.title.endswith(
        "(the typical step waited 0.4 ms: the mean is fetches preempted; the main thread "
        "waited for a core 90% of the measured time; other processes kept 1.8 of 2 cores busy)"
    )


def test_free_cores_a_steady_wait_or_epoch_restarts_keep_the_warning() -> None:
    free = {**STARVED, "other_busy_cores": 0.1, "main_thread_runqueue_wait_s": 0.0}
    assert fit_to_run([_loader()], _record(SPIKY, free))[0].severity == "warning"
    steady = [6.7] * 15  # every batch made in the training process: the loader's own wait
    assert fit_to_run([_loader()], _record(steady, STARVED))[0].severity == "warning"
    restarts = _loader({"restart_ms_per_step": 12.0})  # waits in a few steps by nature
    assert fit_to_run([restarts], _record(SPIKY, STARVED))[0].severity == "warning"
