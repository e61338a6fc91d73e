"""The watchers' one interface: install in order, uninstall in reverse, a failing uninstall is
a note and the others still come out, and a half-done install is removed too."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchdoctor.capture import guest
from torchdoctor.capture.watcher import Watcher, Watchers


class Fake:
    def __init__(self, log: list[str], name: str, fail: str = "") -> None:
        self.log, self.name, self.fail, self.measuring = log, name, fail, False

    def install(self) -> None:
        self.log.append(f"+{self.name}")
        if self.fail == "install":
            raise RuntimeError("half installed")

    def uninstall(self) -> None:
        self.log.append(f"-{self.name}")
        if self.fail == "uninstall":
            raise RuntimeError("stuck")


def test_install_in_order_uninstall_in_reverse_and_failures_are_notes() -> None:
    log: list[str] = []
    ws = Watchers()
    a, b, c = Fake(log, "a"), Fake(log, "b", fail="uninstall"), Fake(log, "c")
    for w in (a, b, c):
        assert isinstance(ws.add(w.name, w), Watcher)
    guest.reset()
    ws.install("a", "b")
    ws.install()  # the rest
    ws.set_measuring(True)
    assert (a.measuring, b.measuring, c.measuring) == (True, True, True)
    ws.uninstall()
    ws.uninstall()  # idempotent: nothing installed any more
    assert log == ["+a", "+b", "+c", "-c", "-b", "-a"]
    assert any("removing the b watch: RuntimeError: stuck" in n for n in guest.notes())
    guest.reset()


def test_a_half_done_install_is_uninstalled() -> None:
    log: list[str] = []
    ws = Watchers()
    ws.add("a", Fake(log, "a"))
    ws.add("b", Fake(log, "b", fail="install"))
    ws.add("c", Fake(log, "c"))
    with pytest.raises(RuntimeError):
        ws.install()
    ws.uninstall()
    assert log == ["+a", "+b", "-b", "-a"]


def test_the_session_holds_every_watcher_in_one_list() -> None:
    pytest.importorskip("torch")
    from torchdoctor.capture.options import CheckOptions
    from torchdoctor.capture.runfolder import RankInfo
    from torchdoctor.capture.session import Session

    s = Session(CheckOptions(), Path("."), RankInfo())
    assert s.watchers.names[0] == "compile" and s.watchers.names[-1] == "accounting"
    assert len(s.watchers.names) == 9
