"""Runtime(memory_history=...): records with Python stacks on CUDA, dumps and analyses on OOM.

No GPU here: the CUDA calls are replaced by autospec mocks of the real torch functions, and the
"dumped" snapshot is a synthetic one with a fragmented cache and an ``oom`` entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
from tests.memory import synth

from torchdoctor.runtime.memory_history import SNAPSHOT_NAME, MemoryHistory


@pytest.fixture
def fake_cuda(tmp_path: Path) -> Any:
    def dump(filename: str = "x", augment_with_fx_traces: bool = False) -> None:
        synth.fragmented_oom(Path(filename))

    with (
        mock.patch.object(torch.cuda, "is_available", autospec=True, return_value=True),
        mock.patch.object(torch.cuda.memory, "_record_memory_history", autospec=True) as record,
        mock.patch.object(
            torch.cuda.memory, "_dump_snapshot", autospec=True, side_effect=dump
        ) as dumped,
        mock.patch.object(torch._C, "_cuda_attach_out_of_memory_observer", create=True) as attach,
    ):
        yield record, dumped, attach


def test_records_python_stacks_and_analyses_the_oom_snapshot(
    tmp_path: Path, fake_cuda: Any
) -> None:
    record, dumped, attach = fake_cuda
    history = MemoryHistory(torch.device("cuda", 0), tmp_path / "out")
    assert history.start()
    assert (
        record.call_args.kwargs["stacks"] == "python"
        and record.call_args.kwargs["enabled"] == "all"
    )
    observer = attach.call_args.args[0]
    observer(0, 256 << 20, 1 << 30, 2 << 20)  # what the allocator calls before raising OOM
    assert dumped.call_args.args[0] == str(tmp_path / "out" / SNAPSHOT_NAME)
    assert history.headline is not None
    assert history.headline["oom"]["requested_bytes"] == 256 << 20
    assert history.headline["top_holders"][0]["where"] == "model.py:41 (forward)"
    assert history.headline["fixes"][0] == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    assert "OOM asking 256 MiB" in history.headline["text"]
    history.stop()
    assert record.call_args.kwargs == {"enabled": None}


def test_observer_never_raises_into_the_allocator(tmp_path: Path, fake_cuda: Any) -> None:
    _, dumped, attach = fake_cuda
    dumped.side_effect = RuntimeError("disk full")
    history = MemoryHistory(torch.device("cuda", 0), tmp_path)
    history.start()
    attach.call_args.args[0](0, 1, 2, 3)  # must not raise
    assert history.headline is None


def test_cpu_device_records_nothing(tmp_path: Path) -> None:
    with mock.patch.object(torch.cuda.memory, "_record_memory_history", autospec=True) as record:
        history = MemoryHistory(torch.device("cpu"), tmp_path)
        assert not history.start()
        history.stop()
    record.assert_not_called()


def test_runtime_option_is_off_by_default_and_explicit(tmp_path: Path) -> None:
    from torchdoctor.runtime.runtime import Runtime

    assert Runtime(device="cpu").memory_history is None
    rt = Runtime(device="cpu", memory_history=tmp_path)
    assert rt.memory_history is not None and rt.memory_history.folder == tmp_path
    assert not rt.memory_history.recording  # CPU: nothing to record
    rt.close()
