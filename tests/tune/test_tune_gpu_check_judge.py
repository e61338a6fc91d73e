"""The GPU check judges ``torchdoctor tune --json`` as the tuner writes it: a search (fake trials,
a CUDA probe, precision only) whose bf16 wins passes; one where nothing beats fp32 fails."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from tune_fakes import FakeWorld

from torchdoctor.tune import report
from torchdoctor.tune.search import Search, Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
judge = importlib.import_module("gpu_check_judge")

H200_PROBE = {
    "device": "cuda",
    "cuda_capability": [9, 0],
    "cpu_count": 16,
    "bf16": True,
    "compiler": True,
    "image_batches": False,
    "optimizer_impls": ["default", "foreach", "fused"],
    "world_size": 1,
    "batch_size": 1024,
}


def _tune_json(factors: dict[tuple[str, object], float]) -> dict[str, object]:
    world = FakeWorld(factors, probe=H200_PROBE)
    search = Search(world, Settings(max_trials=4, knobs=("precision",)))
    return json.loads(report.to_json(search.run()))


def test_a_decisive_bf16_win_passes() -> None:
    data = _tune_json({("precision", "bf16-mixed"): 0.25, ("precision", "tf32"): 0.4})
    baseline = data["baseline"]
    assert isinstance(baseline, dict)
    baseline["data_wait_share"] = 0.01  # the fake trials wait on no loader; a GPU run measures it
    out = judge.judge_tune({"rc": 0, "max_trials": 4, "json": data})
    assert out["pass"], out["checks"]
    assert out["figure"].startswith("bf16-mixed 4.")


def test_no_faster_precision_fails() -> None:
    data = _tune_json({})
    out = judge.judge_tune({"rc": 0, "max_trials": 4, "json": data})
    assert out["pass"] is False
    assert out["checks"]["a claim whose whole interval clears 1 + min_gain"] is False
