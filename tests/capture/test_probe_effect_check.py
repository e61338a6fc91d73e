"""``check`` end to end with an instrument made expensive on purpose: the report's step is the
clean one (the script's own clock agrees), and the window's ratio to it is printed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.capture.check_helpers import check_inprocess

pytestmark = pytest.mark.slow  # each runs check on a 60-step script (about 10 s)

SCRIPT = """
import json, sys, time
import torch

torch.set_num_threads(1)
model = torch.nn.Sequential(*[torch.nn.Linear(384, 384) for _ in range(6)])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(128, 384)
times = []
try:
    for _ in range(60):
        t0 = time.perf_counter()
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        times.append((time.perf_counter() - t0) * 1e3)
finally:
    with open(sys.argv[1], "w") as f:
        json.dump(times, f)
"""


def _burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _own_median(times: list[float], first: int, last: int) -> float:
    """The script's own clock over steps first..last (1-based)."""
    import statistics

    return statistics.median(times[first - 1 : last])


def _run(tmp_path: Path) -> tuple[Any, list[float]]:
    script = tmp_path / "loop.py"
    script.write_text(SCRIPT)
    own = tmp_path / "own.json"
    r = check_inprocess(tmp_path / "runs", script, str(own))
    assert r.code == 0, r.stderr
    return r, json.loads(own.read_text())


def _check_clean_is_reported(r: Any, times: list[float], min_ratio: float) -> None:
    steps, effect = r.run["steps"], r.report["probe_effect"]
    first, last = steps["schedule"]["clean"]
    assert effect is not None and effect["steps"] == last - first + 1
    own_clean = _own_median(times, first, last)
    w0, w1 = steps["window"]
    own_window = _own_median(times, w0 + 1, w1)
    # the planted cost is real in the script's own clock ...
    assert own_window > min_ratio * own_clean, (own_window, own_clean)
    # ... and the report's step is the clean one, not the instrumented one
    assert effect["clean_ms"] == pytest.approx(own_clean, rel=0.35)
    assert effect["clean_ms"] < own_window / min_ratio * 1.2
    (profiled,) = [w for w in effect["windows"] if w["name"] == "profiled"]
    # (whether it is "beyond noise" depends on the machine's load during the clean steps)
    assert profiled["ratio"] > min_ratio
    assert f"{profiled['ratio']:.2f}x the clean step" in r.stdout
    assert "the instruments slowed the step" in r.stdout
    assert f"{effect['clean_ms']:.1f} ms per step un-instrumented" in r.report["verdict"]


def test_a_costly_profiler_hook_leaves_the_reported_step_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    from torchdoctor.capture.session import Session

    class Costly(TorchDispatchMode):  # an instrument that costs 500 us per operator
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            _burn(500e-6)
            return func(*args, **(kwargs or {}))

    mode = Costly()
    start, end = Session.window_start, Session.window_end

    def window_start(self: Session, warmup: int) -> None:
        start(self, warmup)
        mode.__enter__()

    def window_end(self: Session) -> None:
        mode.__exit__(None, None, None)
        end(self)

    monkeypatch.setattr(Session, "window_start", window_start)
    monkeypatch.setattr(Session, "window_end", window_end)
    r, times = _run(tmp_path)
    _check_clean_is_reported(r, times, min_ratio=1.8)


def test_an_expensive_sampler_leaves_the_reported_step_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchdoctor.capture.sampler import StackSampler

    sample = StackSampler._sample

    def costly(self: StackSampler) -> bool:
        _burn(10e-3)  # holds the GIL: the training thread waits
        return sample(self)

    monkeypatch.setattr(StackSampler, "_sample", costly)
    r, times = _run(tmp_path)
    _check_clean_is_reported(r, times, min_ratio=1.3)
    lines = r.run["lines"]
    # the sampler measured its own cost, and backed off from its 1 ms rate
    assert lines["sampler_cpu_ms_per_step"] > 1.0
    assert lines["interval_s"] > 0.002
