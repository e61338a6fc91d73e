"""FSDP in a trace: exposed parameter all-gather is reported apart from gradient reduction.

A synthetic GPU-style trace (NCCL kernels, FSDP2 annotations) with exact expected numbers, and
the same kernels without FSDP's annotations (DDP-like: one exposed-communication finding)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.core.synth import annotation, launched, write_trace
from torchdoctor.api import analyze

GATHER = "ncclDevKernel_AllGather_RING_LL"
REDUCE = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"
GEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3"


def _step(t0: float, corr: int, fsdp: bool) -> list[dict[str, Any]]:
    """One 1000 us step: all-gather 0-100 exposed, 150-250 hidden under compute (100-300),
    compute 300-500, reduce-scatter 450-600 (50 hidden, 100 exposed), compute 600-900."""
    ev = [annotation(f"ProfilerStep#{corr}", t0, 1000.0)]
    kernels = [
        (GATHER, 0, 100),
        (GEMM, 100, 200),
        (GATHER, 150, 100),
        (GEMM, 300, 200),
        (REDUCE, 450, 150),
        (GEMM, 600, 300),
    ]
    for i, (name, start, dur) in enumerate(kernels):
        ev += launched(name, t0 + max(start - 20, 0), t0 + start, dur, corr * 100 + i)
    if fsdp:
        ev += [
            annotation("FSDP::all_gather (layers.0)", t0 + 1, 10.0),
            annotation("FSDP::post_backward_reduce (layers.0)", t0 + 440, 10.0),
        ]
    return ev


def _trace(tmp_path: Path, fsdp: bool) -> Path:
    events = [e for k in range(3) for e in _step(k * 1000.0, k + 1, fsdp)]
    return write_trace(tmp_path / f"fsdp_{fsdp}.json", events)


def test_fsdp_splits_all_gather_from_gradient_reduction(tmp_path: Path) -> None:
    report = analyze(_trace(tmp_path, fsdp=True))
    comm = report.analysis.comm
    assert comm.fsdp
    assert comm.by_kind["AllGather"] == pytest.approx({"comm_ms": 0.6, "exposed_ms": 0.3})
    assert comm.by_kind["ReduceScatter"] == pytest.approx({"comm_ms": 0.45, "exposed_ms": 0.3})
    gather = report.finding("exposed-all-gather")
    reduce = report.finding("exposed-communication")
    assert gather is not None and reduce is not None
    assert gather.saving_ms_per_step == pytest.approx(0.1)
    assert gather.evidence["overlap_share"] == pytest.approx(0.5)
    assert "set_modules_to_forward_prefetch" in gather.fix
    assert reduce.saving_ms_per_step == pytest.approx(0.1)
    assert reduce.title.startswith("Exposed gradient reduction (FSDP)")
    assert reduce.evidence["overlap_share"] == pytest.approx(1 / 3, abs=1e-4)
    assert "set_requires_gradient_sync" in reduce.fix


def test_without_fsdp_all_collectives_are_one_finding(tmp_path: Path) -> None:
    report = analyze(_trace(tmp_path, fsdp=False))
    assert not report.analysis.comm.fsdp
    assert report.finding("exposed-all-gather") is None
    f = report.finding("exposed-communication")
    assert f is not None
    # Union of all collectives minus compute: 100 (gather) + 100 (reduce) us per step.
    assert f.saving_ms_per_step == pytest.approx(0.2)
    assert "DDP(" in f.fix


def test_check_report_keeps_both_fsdp_findings(tmp_path: Path) -> None:
    # check merges the trace's findings with the run's: both FSDP findings must survive.
    from torchdoctor.commands.check.summary import build_report

    trace = _trace(tmp_path, fsdp=True)
    doc, _, merged = build_report({0: {"findings": [], "config": {}}}, trace, 1)
    ids = [f.id for f in merged]
    assert "exposed-all-gather" in ids and "exposed-communication" in ids
    gather = next(f for f in doc["findings"] if f["id"] == "exposed-all-gather")
    assert gather["saving_ms_per_step"] == pytest.approx(0.1)
