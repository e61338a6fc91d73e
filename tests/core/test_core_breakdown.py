"""Step breakdown on a hand-built trace (expected numbers worked out by hand) and on the corpus."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import corpus_file
from tests.core.synth import annotation, cpu_op, kernel, launched, runtime, write_trace
from torchdoctor.analysis.bundle import analyze_table
from torchdoctor.analysis.hta_compat import hta_temporal_breakdown
from torchdoctor.trace.load import load_trace

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _two_steps(tmp_path: Path) -> Path:
    ev = [
        annotation("ProfilerStep#1", 0, 1000),
        annotation("ProfilerStep#2", 1000, 1000),
        cpu_op(DL, 0, 300),
        *launched("gemm_a", 310, 320, 200, corr=1),
        *launched("gemm_b", 330, 522, 78, corr=2),  # queued behind gemm_a: a 2 µs short gap
        runtime("cudaStreamSynchronize", 340, 265, corr=90),  # CPU blocked until 605
        *launched("gemm_c", 700, 710, 90, corr=3),  # GPU ran dry during the sync
        *launched("ncclKernel_AllReduce_RING_LL_Sum_float", 650, 750, 150, corr=4, stream=9),
        runtime("cudaMemcpyAsync", 890, 5, corr=5),
        kernel(
            "Memcpy HtoD (Pageable -> Device)", 900, 50, corr=5, cat="gpu_memcpy", bytes=4 << 20
        ),
        *launched("gemm_d", 1100, 1120, 380, corr=6),
    ]
    return write_trace(tmp_path / "two_steps.json", ev)


def test_parts_by_cause_match_hand_computed_values(tmp_path: Path) -> None:
    a = analyze_table(load_trace(_two_steps(tmp_path)))
    s1, s2 = a.per_step
    assert [s1.step, s2.step] == [1, 2]
    assert s1.step_ms == pytest.approx(1.0)
    assert s1.busy_ms == pytest.approx(
        {
            "compute": 0.368,
            "communication": 0.100,
            "memcpy_h2d": 0.050,
            "memcpy_d2h": 0.0,
            "memcpy_d2d": 0.0,
            "memcpy_other": 0.0,
            "memset": 0.0,
        }
    )
    assert s1.idle_ms == pytest.approx(
        {
            "data_loading": 0.300,
            "synchronization": 0.100,
            "collective_wait": 0.0,
            "input_pipeline": 0.0,  # the step's first gap is the DataLoader's: already named
            "host_overhead": 0.070,
            "short_gaps": 0.012,
            "dependency_wait": 0.0,
        }
    )
    assert s1.pageable_h2d_ms == pytest.approx(0.050)
    # The last step ends with the last recorded activity (gemm_d at 1500 µs), not the marker.
    assert s2.step_ms == pytest.approx(0.5)
    assert s2.busy_ms["compute"] == pytest.approx(0.380)
    # Step 2 begins with the GPU idle and the CPU in no torch operator for 100 µs before it
    # launches gemm_d: an input-pipeline candidate, not launch overhead.
    assert s2.idle_ms == pytest.approx(
        {
            "data_loading": 0.0,
            "synchronization": 0.0,
            "collective_wait": 0.0,
            "input_pipeline": 0.100,
            "host_overhead": 0.0,
            "short_gaps": 0.020,
            "dependency_wait": 0.0,
        }
    )


def test_parts_add_up_to_step_time(tmp_path: Path) -> None:
    a = analyze_table(load_trace(_two_steps(tmp_path)))
    for s in [*a.per_step, a.total]:
        assert s.gpu_busy_ms + s.gpu_idle_ms == pytest.approx(s.step_ms)
    assert a.comm.comm_ms == pytest.approx(0.150)
    assert a.comm.overlapped_ms == pytest.approx(0.050)
    assert a.comm.exposed_ms == pytest.approx(a.total.busy_ms["communication"])


CORPUS_GPU = [
    "v100_resnet50_train_workers0",
    "v100_resnet50_train_workers4",
    "v100_ddp_compiled_rank1",
    "a100_ddp_convnet_nccl",
    "v100_ddp_convnet_ns_timestamps",
    "a100_recsys_train_rank3",
    "v100_recsys_train_rank1",
    "a100_alexnet_syncs_pageable",
    "a100_event_sync_micro",
    "a100_event_sync_multistream_micro",
    "a100_triton_kernel_micro",
    "mi250_toy_train_rocm",
    "h100_bert_small_infer",
    "h100_qwen_0p5b_infer",
    "h100_vit_classifier_infer",
]


@pytest.mark.parametrize("name", CORPUS_GPU)
def test_corpus_parts_add_up(name: str) -> None:
    a = analyze_table(load_trace(corpus_file(name)))
    assert a.has_gpu
    for s in [*a.per_step, a.total]:
        assert s.gpu_busy_ms + s.gpu_idle_ms == pytest.approx(s.step_ms, rel=1e-9, abs=1e-9)
        assert all(v >= -1e-9 for v in [*s.busy_ms.values(), *s.idle_ms.values()])


def _manifest_hta(traces_dir: Path) -> dict[str, tuple[float, float, float]]:
    """HTA's published idle/compute/non-compute percentages, read from MANIFEST.md."""
    rows = {}
    row = re.compile(r"^\| (\w+) \| [\d.]+ \| \d+ \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|")
    for line in (traces_dir / "MANIFEST.md").read_text().splitlines():
        m = row.match(line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)), float(m.group(4)))
    return rows


@pytest.mark.slow
def test_hta_compatible_breakdown_matches_hta_on_every_trace(traces_dir: Path) -> None:
    published = _manifest_hta(traces_dir)
    assert len(published) >= 13  # every trace HTA could analyse
    for name, expected in published.items():
        h = hta_temporal_breakdown(load_trace(traces_dir / f"{name}.json.gz"))
        assert h is not None, name
        got = (h.idle_pct, h.compute_pct, h.non_compute_pct)
        assert got == pytest.approx(expected, abs=0.02), name


def test_cpu_only_trace_gets_cpu_side_breakdown() -> None:
    a = analyze_table(load_trace(corpus_file("cpu_only_rank34")))
    assert not a.has_gpu
    assert a.hta is None
    t = a.total
    assert set(t.idle_ms) == {
        "cpu_operators",
        "communication",
        "data_loading",
        "input_pipeline",
        "other",
    }
    assert t.idle_ms["input_pipeline"] == 0.0  # no operator recorded: "outside one" is unknown
    assert t.idle_ms["communication"] > 0.8 * t.step_ms  # gloo all_reduce fills the step
    assert sum(t.idle_ms.values()) == pytest.approx(t.step_ms)
