"""Edge cases on snapshots built in the test: OOM, fragmentation fixes, holders, devices, streaming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.memory import synth
from tests.memory.snapshot_writer import repeated, write_snapshot
from torchdoctor.memory.analysis import analyze_snapshot
from torchdoctor.memory.frames import BACKWARD_THREAD, classify
from torchdoctor.memory.replay import SERIES_POINTS, Series
from torchdoctor.report.memory_text import render_json, render_text

MIB = synth.MIB
BASE = 1 << 40


def _fragmented(tmp_path: Path, alloc_settings: dict | None = None) -> Path:
    return synth.fragmented_oom(tmp_path / "frag.pickle", alloc_settings)


@pytest.mark.parametrize("stream", [False, True])
def test_oom_reports_request_free_fragmented_and_holders(tmp_path: Path, stream: bool) -> None:
    d = analyze_snapshot(_fragmented(tmp_path), stream=stream).devices[0]
    assert d.history is not None and len(d.history.ooms) == 1
    oom = d.history.ooms[0]
    assert oom.requested_bytes == 256 * MIB and oom.device_free_bytes == 2 * MIB
    assert oom.allocated_bytes == 16 * 64 * MIB and oom.reserved_bytes == 2048 * MIB
    assert oom.cached_unallocated_bytes == 1024 * MIB
    assert (
        oom.top_holders[0].label == "model.py:41 (forward)"
        and oom.top_holders[0].live_bytes == 1024 * MIB
    )
    # 1 GiB free in 64 MiB pieces: the 256 MiB request fits in the bytes but in no block
    assert (
        d.segments.split_free_bytes == 1024 * MIB
        and d.segments.largest_free_block_bytes == 64 * MIB
    )
    assert d.fragmentation_matters
    assert [f.knob for f in d.fixes] == [
        "expandable_segments",
        "max_split_size_mb",
        "garbage_collection_threshold",
    ]
    assert "OUT OF MEMORY: requested 256 MiB" in render_text(
        analyze_snapshot(_fragmented(tmp_path))
    )


def test_fixes_never_repeat_what_is_on(tmp_path: Path) -> None:
    on = synth.settings(
        expandable_segments=True,
        garbage_collection_threshold=0.6,
        PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True,garbage_collection_threshold:0.6",
    )
    d = analyze_snapshot(_fragmented(tmp_path, on)).devices[0]
    assert [f.knob for f in d.fixes] == ["max_split_size_mb"]
    # the pasted line keeps what the user already set
    assert d.fixes[0].env.startswith(
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,garbage_collection_threshold:0.6,max_split_size_mb:"
    )
    split = synth.settings(
        max_split_size=128 * MIB, PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128"
    )
    assert "max_split_size_mb" not in [
        f.knob for f in analyze_snapshot(_fragmented(tmp_path, split)).devices[0].fixes
    ]
    # only the conf string says it is on (no parsed flag): still not suggested
    conf_only = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert "expandable_segments" not in [
        f.knob for f in analyze_snapshot(_fragmented(tmp_path, conf_only)).devices[0].fixes
    ]


def test_holder_labels_and_categories() -> None:
    inductor = synth.frame(
        "/tmp/torchinductor_me/ab/cabcdefghijklmnopqrstuvwxyz0123456789abcdefghij.py", 220, "call"
    )
    compiled = [synth.CPP, inductor, synth.frame("/home/me/net.py", 12, "forward"), synth.TORCH]
    assert classify(compiled).label == "compiled graph of net.py:12 (forward)"
    assert classify(compiled).category == "activations"
    opt = [
        synth.CPP,
        synth.frame("/venv/lib/python3.11/site-packages/torch/optim/adam.py", 100, "step"),
        synth.frame("/venv/lib/python3.11/site-packages/torch/optim/optimizer.py", 526, "wrapper"),
        synth.frame("/home/me/train.py", 30, "train_step"),
    ]
    assert (
        classify(opt).label == "train.py:30 (train_step)"
        and classify(opt).category == "optimizer state"
    )
    engine = [
        synth.CPP,
        {"name": "torch::autograd::Engine::thread_main(...)", "filename": "??", "line": 0},
    ]
    assert classify(engine).label == BACKWARD_THREAD and classify(engine).category == "gradients"
    params = [
        synth.CPP,
        synth.frame("/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", 900, "_apply"),
        synth.frame("/home/me/train.py", 5, "<module>"),
    ]
    assert classify(params).category == "parameters"
    assert classify([]).label == "<no stack recorded>"


def _dev1_only(tmp_path: Path) -> Path:
    seg = synth.segment(
        BASE,
        [
            synth.block(BASE, 2 * MIB, "active_allocated"),
            synth.block(BASE + 2 * MIB, 18 * MIB, "inactive"),
        ],
        device=1,
    )
    entries = [
        synth.entry("segment_alloc", BASE, 20 * MIB, 1),
        synth.entry("alloc", BASE, 2 * MIB, 2, synth.user_stack("/w/a.py", 7)),
        synth.entry("alloc", BASE + 2 * MIB, 8 * MIB, 3, synth.user_stack("/w/b.py", 9)),
        synth.entry("free_requested", BASE + 2 * MIB, 8 * MIB, 4),
        synth.entry("free_completed", BASE + 2 * MIB, 8 * MIB, 5),
    ]
    return synth.write(tmp_path / "dev1.pickle", [seg], [[], entries])


@pytest.mark.parametrize("stream", [False, True])
def test_device_index_and_reserved_replay(tmp_path: Path, stream: bool) -> None:
    report = analyze_snapshot(_dev1_only(tmp_path), stream=stream)
    assert [d.device for d in report.devices] == [1]
    h = report.devices[0].history
    assert h is not None and h.baseline_allocated_bytes == 0 and h.peak_allocated_bytes == 10 * MIB
    assert [r.label for r in h.holders_at_peak] == ["b.py:9 (forward)", "a.py:7 (forward)"]
    assert h.consistent


def test_history_window_starting_mid_run(tmp_path: Path) -> None:
    """The first entry frees a block allocated before the window: the level before it is known."""
    seg = synth.segment(
        BASE,
        [
            synth.block(BASE, 4 * MIB, "active_allocated"),
            synth.block(BASE + 4 * MIB, 16 * MIB, "inactive"),
        ],
    )
    entries = [
        synth.entry("free_requested", BASE + 4 * MIB, 16 * MIB, 1),
        synth.entry("free_completed", BASE + 4 * MIB, 16 * MIB, 2),
    ]
    h = analyze_snapshot(synth.write(tmp_path / "w.pickle", [seg], [entries])).devices[0].history
    assert h is not None
    assert h.baseline_allocated_bytes == 20 * MIB and h.peak_allocated_bytes == 20 * MIB
    assert h.holders_at_peak[0].label == "<allocated before the recorded history>"


def test_series_stays_bounded_and_keeps_the_maximum() -> None:
    s = Series()
    values = [(i * 7919) % 10007 for i in range(20000)]
    for t, v in enumerate(values):
        s.add(t, v, 0)
    s.flush()
    assert len(s.points) <= SERIES_POINTS
    assert max(p[1] for p in s.points) == max(values)


@pytest.mark.slow
def test_streaming_a_repeated_history_matches_the_whole_reader(
    tmp_path: Path, gpt_raw: dict
) -> None:
    """A file written like pickle.dump with fresh entries sharing frames (the benchmark's shape)."""
    path = tmp_path / "rep.pickle"
    with path.open("wb") as f:
        write_snapshot(f, gpt_raw, [repeated(gpt_raw["device_traces"][0], 3)])
    whole = json.loads(render_json(analyze_snapshot(path, stream=False)))
    streamed = json.loads(render_json(analyze_snapshot(path, stream=True)))
    whole.pop("streamed"), streamed.pop("streamed")
    assert whole == streamed
    assert whole["devices"][0]["history"]["entries"] == 3 * 6486
