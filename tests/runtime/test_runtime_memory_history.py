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


def test_records_python_stacks_and_analyses_the_oom_snapshot_later(
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
    # What the allocator passes before raising: device, request, the device's limit, free bytes.
    observer(0, 256 << 20, 80 << 30, 2 << 20)
    assert dumped.call_args.args[0] == str(tmp_path / "out" / SNAPSHOT_NAME)
    # Inside the allocator only the snapshot is written; reading it back waits until later.
    assert history.pending and history.headline is None
    assert history.ooms == [
        {
            "device": 0,
            "tried_bytes": 256 << 20,
            "device_limit_bytes": 80 << 30,
            "device_free_bytes": 2 << 20,
        }
    ]
    headline = history.report()
    assert headline is history.headline and headline is not None and not history.pending
    assert headline["oom"]["requested_bytes"] == 256 << 20
    assert headline["top_holders"][0]["where"] == "model.py:41 (forward)"
    assert headline["fixes"][0] == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    assert "OOM asking 256 MiB" in headline["text"]
    history.stop()
    assert record.call_args.kwargs == {"enabled": None}


def test_observer_is_capped_and_deactivated_on_stop(tmp_path: Path, fake_cuda: Any) -> None:
    _, dumped, attach = fake_cuda
    history = MemoryHistory(torch.device("cuda", 0), tmp_path)
    history.start()
    observer = attach.call_args.args[0]
    for _ in range(10):  # cuDNN-style retries: caught OOMs, one after another
        observer(0, 1 << 30, 80 << 30, 0)
    assert history.observed_ooms == 10 and dumped.call_count == history.max_dumps == 3
    assert history.headline is None  # still nothing analysed inside the allocator
    history.stop()  # analyses the pending snapshot, then the observer goes quiet
    assert history.headline is not None and not history.pending
    observer(0, 1 << 30, 80 << 30, 0)  # torch keeps the callable: after stop it does nothing
    assert history.observed_ooms == 10 and dumped.call_count == 3
    assert history.record()["dumps"] == 3 and len(history.record()["ooms"]) == 10


def test_observer_never_raises_into_the_allocator(tmp_path: Path, fake_cuda: Any) -> None:
    _, dumped, attach = fake_cuda
    dumped.side_effect = RuntimeError("disk full")
    history = MemoryHistory(torch.device("cuda", 0), tmp_path)
    history.start()
    attach.call_args.args[0](0, 1, 2, 3)  # must not raise
    assert history.headline is None and not history.pending
    assert history.report() is None and "disk full" in str(history.error)


def test_runtime_step_analyses_a_caught_oom(tmp_path: Path) -> None:
    from torchdoctor.runtime.runtime import Runtime

    rt = Runtime(device="cpu")
    reports: list[bool] = []

    class Pending:
        pending = True

        def report(self) -> None:
            reports.append(True)
            self.pending = False

        def stop(self) -> None: ...

    rt.memory_history = Pending()  # type: ignore[assignment]
    model = rt.setup(torch.nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        rt.backward(model(torch.ones(4, 2)).sum())
        rt.step(opt)
    assert reports == [True]  # once, at the first step after the OOM
    rt.close()


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
