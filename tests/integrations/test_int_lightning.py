"""The Lightning callback on real (tiny, CPU) training runs, under both namespaces, and
``torchdoctor check`` on a Lightning script."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "lightning", reason="lightning not installed (pip install 'torchdoctor[lightning]')"
)

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import lightning_app as app  # noqa: E402

import torchdoctor  # noqa: E402
from torchdoctor.integrations.lightning import DoctorCallback  # noqa: E402

pytestmark = pytest.mark.slow


def _fit(namespace: str, delay_s: float, tmp_path: Path, logger: Any = False) -> Any:
    model_cls, data_cls, make = app.build(namespace, delay_s)
    # a 10-step fit: 2 warm-up, 3 clean, the profiler's own step, 3 profiled, 1 after
    cb = DoctorCallback(warmup_steps=2, clean_steps=3, profile_steps=3, out_dir=tmp_path / "runs")
    make([cb], logger=logger).fit(model_cls(), data_cls())
    assert cb.result is not None
    return cb.result


def test_callback_reports_the_slow_loader_in_lightning_terms(tmp_path: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger

    result = _fit("lightning.pytorch", 0.004, tmp_path, CSVLogger(tmp_path / "logs"))
    steps = result.record["steps"]
    assert (steps["count"], steps["source"], steps["profiled_steps"]) == (10, "optimizer", 3)
    fw = result.record["framework"]
    assert fw["namespace"] == "lightning.pytorch" and fw["datamodule"] == "Data"
    # the callback's parts close the record, after check's findings (as they always have)
    assert list(result.record)[-3:] == ["findings", "framework", "frameworks"]
    assert result.record["frameworks"] == []
    assert (fw["precision"], fw["strategy"]) == ("32-true", "SingleDeviceStrategy")
    first = result.report["findings"][0]
    assert first["id"] == "dataloader-config"
    workers = first["evidence"]["suggested_num_workers"]
    assert "LightningDataModule" in first["fix"] and f"num_workers={workers}," in first["fix"]
    # the items sleep: measured waiting, so the count is not capped at this machine's CPUs
    assert first["evidence"]["on_cpu_share"] < 0.5 and workers >= 2
    assert first["evidence"]["pytorch_fix"].startswith("DataLoader(dataset")
    assert (
        result.headline.startswith("torchdoctor: 10 steps") and "num_workers=0" in result.headline
    )
    text = (result.folder / "report.txt").read_text()
    assert "LightningDataModule" in text and "hint:" not in text
    assert (
        json.loads((result.folder / "report.json").read_text())["findings"][0]["fix"]
        == first["fix"]
    )
    # The headline numbers reached the trainer's logger.
    rows = list(csv.DictReader(next((tmp_path / "logs").rglob("metrics.csv")).open()))
    logged = [r for r in rows if r.get("torchdoctor/median_step_ms")]
    assert logged and float(logged[-1]["torchdoctor/median_step_ms"]) == pytest.approx(
        steps["median_step_ms"]
    )


def test_callback_under_pytorch_lightning_with_a_fast_loader(tmp_path: Path) -> None:
    pytest.importorskip("pytorch_lightning", reason="pytorch_lightning not installed")
    result = _fit("pytorch_lightning", 0.0, tmp_path)
    assert result.record["framework"]["namespace"] == "pytorch_lightning"
    assert result.record["steps"]["count"] == 10
    # Nothing planted: an in-memory dataset keeps the step waiting for nothing.
    assert "dataloader-config" not in [f["id"] for f in result.report["findings"]]


def test_check_on_a_lightning_script_works_and_points_at_the_callback(tmp_path: Path) -> None:
    result = torchdoctor.check(
        HERE / "lightning_app.py", ["20"], warmup_steps=2, profile_steps=3, out_dir=tmp_path
    )
    assert result.exit_code == 0
    assert result.record["exit"]["status"] == "stopped"  # check ends it after the window
    # stopped after 2 warm-up, 8 clean, the profiler's own step, 3 profiled, 5 clean again
    assert result.steps["source"] == "optimizer" and result.steps["count"] == 19
    assert result.record["frameworks"] == ["lightning"]
    assert "torchdoctor.integrations.lightning import DoctorCallback" in result.text
    assert result.findings[0].id == "dataloader-config"
    # the loader is built by Lightning's loop: the fix is the LightningDataModule's, and the
    # loop-level one (into the loader Lightning rebuilt) is kept in the evidence
    assert "train_dataloader()" in result.findings[0].fix
    assert "lightning/" not in result.findings[0].fix
    assert "pytorch_fix" in result.findings[0].evidence
