"""Findings on the real corpus: what each recorded workload is known to suffer from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import corpus_report
from tests.core.synth import launched, runtime, write_trace
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.report.render import render_json


def _ids(name: str) -> list[str]:
    return [f.id for f in corpus_report(name).findings]


def test_workers0_is_data_loading_bound_first() -> None:
    report = corpus_report("v100_resnet50_train_workers0")
    top = report.findings[0]
    assert top.id == "data-loading-bound"
    assert top.severity == "critical"
    assert 0.25 <= top.share_of_step <= 0.5  # about a third of each step waits for data
    assert "data loading" in report.verdict


def test_workers4_does_not_blame_data_loading() -> None:
    assert "data-loading-bound" not in _ids("v100_resnet50_train_workers4")


def test_ddp_compiled_reports_exposed_communication() -> None:
    report = corpus_report("v100_ddp_compiled_rank1")
    f = next(f for f in report.findings if f.id == "exposed-communication")
    assert f.evidence["overlap_share"] == 0.0  # nothing overlapped, as HTA also says
    assert f.severity == "critical"


def test_alexnet_reports_sync_and_pageable_copies() -> None:
    ids = _ids("a100_alexnet_syncs_pageable")
    assert "sync-stalls" in ids
    assert "pageable-h2d-copies" in ids


@pytest.mark.parametrize("name", ["h100_bert_small_infer", "h100_vit_classifier_infer"])
def test_h100_inference_is_host_bound(name: str) -> None:
    report = corpus_report(name)
    assert report.findings[0].id == "host-bound"
    assert report.findings[0].share_of_step > 0.5  # the GPU mostly waits on the host


def test_v100_fp32_convnet_is_told_to_use_fp16_autocast() -> None:
    report = corpus_report("v100_resnet50_train_workers4")
    f = next(f for f in report.findings if f.id == "fp32-gemm-no-tensor-cores")
    assert "GradScaler" in f.fix  # V100: no bf16, so fp16 with loss scaling


@pytest.mark.parametrize(
    "name",
    [
        "v100_ddp_compiled_rank1",
        "a100_alexnet_syncs_pageable",
        "h100_qwen_0p5b_infer",
        "cpu_only_rank34",
    ],
)
def test_findings_are_well_formed_and_ranked(name: str) -> None:
    report = corpus_report(name)
    step = report.analysis.mean_step_ms
    savings = [f.saving_ms_per_step for f in report.findings]
    assert savings == sorted(savings, reverse=True)
    for f in report.findings:
        assert 0 <= f.saving_ms_per_step <= step + 1e-9
        assert f.fix and f.doc_url.startswith("https://")
    doc = json.loads(render_json(report))
    assert doc["schema_version"] == 1
    assert [f["id"] for f in doc["findings"]] == [f.id for f in report.findings]


def test_a_healthy_synthetic_trace_has_no_warnings(tmp_path: Path) -> None:
    # Back-to-back queued kernels, launched well ahead: nothing to fix.
    ev = [runtime("cudaLaunchKernel", 0, 1, 0)]
    for i in range(50):
        ev += launched("volta_h884gemm_128x128", i * 2.0, 10 + i * 100.0, 99.0, corr=i + 1)
    ev.append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 100,
            "tid": 100,
            "ts": 0,
            "dur": 5010,
        }
    )
    report = analyze_path(write_trace(tmp_path / "ok.json", ev))
    assert [f for f in report.findings if f.severity != "info"] == []
    assert "No bottleneck" in report.verdict


def _ops_trace(tmp_path: Path, names: list[str]) -> Path:
    ev: list[dict[str, object]] = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 100,
            "tid": 100,
            "ts": 0,
            "dur": 1000,
        },
        *launched("volta_h884gemm_128x128", 1, 10, 900, corr=1),
    ]
    for i, n in enumerate(names):
        ev.append(
            {"ph": "X", "cat": "cpu_op", "name": n, "pid": 100, "tid": 100, "ts": 2 + i, "dur": 1}
        )
    return write_trace(tmp_path / "ops.json", ev)


def test_data_parallel_found_from_its_ops(tmp_path: Path) -> None:
    report = analyze_path(_ops_trace(tmp_path, ["DataParallel.forward", "ReduceAddCoalesced"]))
    f = next(f for f in report.findings if f.id == "data-parallel")
    assert f.evidence["data_parallel_ops"] == {"DataParallel.forward": 1, "ReduceAddCoalesced": 1}


def test_ddp_is_not_mistaken_for_data_parallel(tmp_path: Path) -> None:
    names = ["DistributedDataParallel.forward", "nn.Module: DistributedDataParallel"]
    report = analyze_path(_ops_trace(tmp_path, names))
    assert "data-parallel" not in [f.id for f in report.findings]
