"""The side-stream prefetcher's CUDA ordering without a GPU: ``torch.cuda``'s streams and events
are replaced by recording fakes, so each test reads the order of copies, waits and hand-offs.

- batches are counted when the loop takes them, not when they are copied ahead;
- a batch already on the device (made on the compute stream) is copied or converted on the side
  stream only after the side stream waited for the stream that produced it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import pytest
import torch

from torchdoctor.runtime import data as data_mod
from torchdoctor.runtime.data import DevicePrefetcher
from torchdoctor.runtime.meter import Meter
from torchdoctor.runtime.transfer import batch_counts

DEVICE = torch.device("cuda", 0)


class Log:
    """Everything the fakes saw, in order."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, str]] = []
        self.current = "compute"


class FakeStream:
    def __init__(self, log: Log, name: str) -> None:
        self.log, self.name = log, name

    def wait_stream(self, other: FakeStream) -> None:
        self.log.ops.append((f"{self.name} waits for stream", other.name))

    def wait_event(self, event: FakeEvent) -> None:
        self.log.ops.append((f"{self.name} waits for event", event.stream))


class FakeEvent:
    def __init__(self, log: Log) -> None:
        self.log, self.stream = log, ""

    def record(self, stream: FakeStream) -> None:
        self.stream = stream.name


def _install(monkeypatch: pytest.MonkeyPatch) -> Log:
    log = Log()
    streams = {"compute": FakeStream(log, "compute")}

    def new_stream(device: Any = None) -> FakeStream:
        streams["side"] = FakeStream(log, "side")
        return streams["side"]

    @contextmanager
    def use(stream: FakeStream) -> Any:
        before, log.current = log.current, stream.name
        try:
            yield
        finally:
            log.current = before

    def mover(device: torch.device, *, channels_last: bool = False) -> Any:
        def move(t: torch.Tensor) -> torch.Tensor:
            log.ops.append(("channels_last" if channels_last else "copy", log.current))
            return t

        return move

    monkeypatch.setattr(torch.cuda, "Stream", new_stream)
    monkeypatch.setattr(torch.cuda, "stream", use)
    monkeypatch.setattr(torch.cuda, "Event", lambda **kw: FakeEvent(log))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: streams[log.current])
    monkeypatch.setattr(data_mod, "tensor_mover", mover)
    return log


def test_batches_are_counted_when_consumed(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch)
    meter = Meter(torch.device("cpu"))  # host clock; only the per-step sample counts matter

    def count(batch: Any) -> None:
        meter.count_batch(*batch_counts(batch))

    steps = 20
    source = [torch.zeros(8, 3) for _ in range(steps)]
    seen = []
    for _ in DevicePrefetcher(source, DEVICE, depth=2, on_batch=count):
        seen.append(meter._cur_samples)  # what the step about to run has been credited with
        meter.step_end()
    # Each step trains on one batch of 8: counting at copy time credited the first step with
    # three batches and the last two with none (samples/s about depth/N low in steady state).
    assert seen == [8] * steps
    assert meter._samples == [8] * steps


def test_device_batches_wait_for_their_producer_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _install(monkeypatch)
    # Batches the compute stream produced (an on-GPU augmentation, a GPU-resident dataset):
    # "meta" stands in for a device tensor (not on the CPU, no storage to read).
    source = [torch.empty(2, 3, 4, 4, device="meta") for _ in range(3)]
    list(DevicePrefetcher(source, DEVICE, depth=2, channels_last=True))
    converts = [i for i, op in enumerate(log.ops) if op == ("channels_last", "side")]
    waits = [i for i, op in enumerate(log.ops) if op == ("side waits for stream", "compute")]
    assert len(converts) == 3 and len(waits) == 3
    # Every conversion on the side stream comes after a wait for the producer, one per batch.
    assert all(w < c for w, c in zip(waits, converts, strict=True))
    assert all(c < w for c, w in zip(converts, waits[1:], strict=False))


def test_host_batches_do_not_wait_for_the_compute_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _install(monkeypatch)
    # Host batches: the copy may start at once, overlapping the compute stream's current step.
    list(DevicePrefetcher([torch.zeros(4) for _ in range(3)], DEVICE, depth=2))
    assert ("side waits for stream", "compute") not in log.ops
    assert [op for op in log.ops if op[0] == "copy"] == [("copy", "side")] * 3
    assert log.ops.count(("compute waits for event", "side")) == 3
