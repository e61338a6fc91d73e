"""What both framework callbacks share (``WatchingCallback``), with a fake run watch: the hooks
start and finish it once, a failure of ours is one line and never reaches the training loop."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from torchdoctor.errors import UserError
from torchdoctor.integrations import watch
from torchdoctor.integrations.watch import WatchingCallback, WatchResult


class _FakeWatch:
    def __init__(self, framework: str, options: Any, name: str) -> None:
        self.framework, self.name = framework, name
        self.session: Any = None
        self.finished: list[tuple[dict[str, Any], str]] = []

    @property
    def active(self) -> bool:
        return self.session is not None

    def start(self) -> None:
        self.session = SimpleNamespace(hooks=SimpleNamespace(loaders={}))

    def finish(self, info: dict[str, Any], status: str = "completed") -> WatchResult:
        self.session = None
        self.finished.append((info, status))
        return WatchResult(watch.Path("runs/x"), {}, None, "torchdoctor: 3 steps")


class _Callback(WatchingCallback):
    framework = "fake"


@pytest.fixture
def fake_watch(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from torchdoctor.capture import guest

    guest.reset()
    monkeypatch.setattr(watch, "RunWatch", _FakeWatch)
    monkeypatch.setattr(watch, "run_name", lambda fallback: fallback)
    monkeypatch.setattr(
        "torchdoctor.capture.hooks.loader_settings", lambda loader: {"workers": loader.num_workers}
    )
    yield
    guest.reset()  # the notes a failure left are this test's, not a later run's


def test_begin_reads_the_loaders_built_before_it_and_end_runs_once(fake_watch: None) -> None:
    cb = _Callback(warmup_steps=2, profile_steps=3, out_dir="runs")
    assert (cb.options.warmup_steps, cb.options.profile_steps, cb.options.full) == (2, 3, True)
    loader = SimpleNamespace(num_workers=4)
    cb._begin("hook", "Model", lambda: [loader, None])
    fake = cb._watch
    assert isinstance(fake, _FakeWatch) and (fake.framework, fake.name) == ("fake", "Model")
    assert fake.session.hooks.loaders == {id(loader): {"workers": 4}}
    logged: list[str] = []
    for _ in range(2):  # on_train_end after on_exception: the run is written once
        cb._end("end", lambda: {"precision": "bf16"}, lambda r: logged.append(r.headline), "error")
    assert fake.finished == [({"precision": "bf16"}, "error")]
    assert logged == ["torchdoctor: 3 steps"] and cb.result is not None


def test_a_failure_of_ours_is_one_line_and_training_goes_on(
    fake_watch: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCHDOCTOR_DEBUG", raising=False)
    cb = _Callback()

    def broken_loaders() -> list[Any]:
        raise RuntimeError("no loaders here")

    cb._begin("DoctorCallback.on_train_start", "Model", broken_loaders)  # does not raise
    cb._end("DoctorCallback.on_train_end", lambda: 1 / 0, lambda r: None)  # type: ignore[arg-type,return-value]
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "torchdoctor: DoctorCallback.on_train_start failed (RuntimeError: no loaders here); "
        "training goes on without it",
        "torchdoctor: DoctorCallback.on_train_end failed (ZeroDivisionError: division by zero); "
        "training goes on without it",
    ]
    assert cb.result is None
    from torchdoctor.capture import guest

    assert guest.notes() == [
        "DoctorCallback.on_train_start: RuntimeError: no loaders here",
        "DoctorCallback.on_train_end: ZeroDivisionError: division by zero",
    ]


def test_an_unknown_keyword_names_the_callback() -> None:
    with pytest.raises(UserError, match=r"^DoctorCallback: .*'warmup'"):
        _Callback(warmup=3)
