"""Step detection: ProfilerStep markers, the fallbacks, and the whole-trace window."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import corpus_file
from tests.core.synth import annotation, cpu_op, launched, write_trace
from torchdoctor.trace.load import load_trace
from torchdoctor.trace.steps import find_steps


def test_profiler_steps_on_corpus() -> None:
    s = find_steps(load_trace(corpus_file("v100_resnet50_train_workers0")))
    assert s.source == "profiler-step"
    assert s.numbers == [5, 6, 7, 8, 9, 10]
    # Windows tile the profiled region: each ends where the next begins.
    assert list(s.ends_us[:-1]) == list(s.starts_us[1:])


def test_duplicate_markers_on_gpu_timeline_count_once() -> None:
    # The H100 traces mark ProfilerStep#6 on the CPU and again as a gpu_user_annotation.
    s = find_steps(load_trace(corpus_file("h100_bert_small_infer")))
    assert s.numbers == [6]


def test_no_markers_falls_back_to_optimizer_steps(tmp_path: Path) -> None:
    ev = []
    for i in range(3):
        t0 = i * 1000.0
        ev += [cpu_op("Optimizer.step#SGD.step", t0 + 800, 100), *launched("k", t0, t0 + 10, 50, i)]
    s = find_steps(load_trace(write_trace(tmp_path / "t.json", ev)))
    assert s.source == "optimizer-step"
    assert len(s) == 3
    assert "optimizer" in s.note


def test_no_signal_at_all_is_one_window_and_says_so(tmp_path: Path) -> None:
    ev = [*launched("k", 0, 10, 50, 1), *launched("k", 100, 110, 50, 2)]
    s = find_steps(load_trace(write_trace(tmp_path / "t.json", ev)))
    assert s.source == "whole-trace"
    assert s.window == pytest.approx((0.0, 160.0))
    assert "whole trace" in s.note


def test_marker_that_outlives_the_trace_is_clipped() -> None:
    # The triton micro trace's ProfilerStep#1 claims 13 s; its events span about 1.5 ms.
    s = find_steps(load_trace(corpus_file("a100_triton_kernel_micro")))
    assert s.durations_ms[0] < 2.0


def test_dataloader_fallback(tmp_path: Path) -> None:
    dl = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
    ev = [annotation(dl, i * 500.0, 20) for i in range(4)]
    ev += [*launched("k", 30, 40, 100, 1)]
    s = find_steps(load_trace(write_trace(tmp_path / "t.json", ev)))
    assert s.source == "dataloader"
    assert len(s) == 4
