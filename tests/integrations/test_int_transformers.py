"""The Hugging Face callback on a real (tiny, CPU, built-in-code) Trainer run, and
``torchdoctor check`` on a Trainer script."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="transformers not installed")
pytest.importorskip("accelerate", reason="accelerate not installed (the Trainer needs it)")

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import transformers_app as app  # noqa: E402

import torchdoctor  # noqa: E402
from torchdoctor.integrations.transformers import DoctorCallback  # noqa: E402

pytestmark = pytest.mark.slow


def test_callback_reports_the_slow_loader_as_training_arguments(tmp_path: Path) -> None:
    # a 10-step run: 2 warm-up, 3 clean, the profiler's own step, 3 profiled, 1 after
    cb = DoctorCallback(warmup_steps=2, clean_steps=3, profile_steps=3, out_dir=tmp_path / "runs")
    trainer = app.make_trainer(tmp_path / "out", [cb])
    trainer.train()
    result = cb.result
    assert result is not None
    steps = result.record["steps"]
    assert (steps["count"], steps["source"], steps["profiled_steps"]) == (10, "optimizer", 3)
    fw = result.record["framework"]
    assert fw["name"] == "transformers" and fw["dataloader_num_workers"] == 0
    assert (fw["bf16"], fw["torch_compile"], fw["gradient_accumulation_steps"]) == (False, False, 1)
    found = {f["id"]: f for f in result.report["findings"]}
    loader = found["dataloader-config"]
    workers = loader["evidence"]["suggested_num_workers"]
    assert loader["fix"].startswith(f"TrainingArguments(..., dataloader_num_workers={workers},")
    assert workers >= 2  # the count the report's own DataLoader fix asks for, as Trainer args
    assert "dataloader_persistent_workers=True" in loader["fix"]
    assert "DataLoader(dataset" in loader["evidence"]["pytorch_fix"]
    # The headline is in the Trainer's own log history.
    last = trainer.state.log_history[-1]
    assert last["torchdoctor/headline"] == result.headline and last["step"] == 10
    assert "TrainingArguments" in (result.folder / "report.txt").read_text()


def test_check_on_a_trainer_script_points_at_the_callback(tmp_path: Path) -> None:
    result = torchdoctor.check(
        HERE / "transformers_app.py",
        [str(tmp_path / "out"), "20"],
        warmup_steps=2,
        profile_steps=2,
        out_dir=tmp_path / "runs",
    )
    assert result.exit_code == 0 and result.record["exit"]["status"] == "stopped"
    # stopped after 2 warm-up, 8 clean, the profiler's own step, 2 profiled, 5 clean again
    assert result.steps["count"] == 18 and result.steps["source"] == "optimizer"
    assert result.record["frameworks"] == ["transformers"]
    assert "torchdoctor.integrations.transformers import DoctorCallback" in result.text
    assert "dataloader-config" in [f.id for f in result.findings]
