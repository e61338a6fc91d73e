"""The one interface of ``check``'s watchers, and the list a ``Session`` holds them in.

A watcher puts its hooks or patches into the process (``install``) and takes them out again
(``uninstall``, idempotent); one that records only during the measured steps has a
``measuring`` flag the session switches. The list installs in order and uninstalls in reverse
(patches of one attribute unwind in the order they were stacked), and a watcher whose
``uninstall`` fails is reported as a note while the others still come out: a guest never
leaves its hooks behind in the host because one of them broke.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torchdoctor.capture import guest


@runtime_checkable
class Watcher(Protocol):
    """Something ``check`` installs into the watched process and removes after it."""

    def install(self) -> None: ...

    def uninstall(self) -> None: ...


class Watchers:
    """Named watchers in install order."""

    def __init__(self) -> None:
        self._all: list[tuple[str, Watcher]] = []
        self._installed: list[tuple[str, Watcher]] = []

    def add(self, name: str, watcher: Watcher) -> Watcher:
        """Add ``watcher`` (installed after the ones before it); returns it."""
        self._all.append((name, watcher))
        return watcher

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self._all]

    def install(self, *names: str) -> None:
        """Install the named watchers (all not yet installed when none are named), in order.
        An error propagates; that watcher and the ones before it are remembered for
        ``uninstall`` (every ``uninstall`` is idempotent, so a half-done install comes out)."""
        done = {id(w) for _, w in self._installed}
        for name, watcher in self._all:
            if (names and name not in names) or id(watcher) in done:
                continue
            self._installed.append((name, watcher))  # first: a half-done install comes out too
            watcher.install()

    def uninstall(self) -> None:
        """Remove every installed watcher, the last installed first (idempotent); a failure is
        a note, and the rest still come out."""
        while self._installed:
            name, watcher = self._installed.pop()
            try:
                watcher.uninstall()
            except Exception as exc:
                guest.note(f"removing the {name} watch", exc)

    def set_measuring(self, on: bool) -> None:
        """Switch the ``measuring`` flag of every watcher that has one."""
        for _, watcher in self._all:
            if isinstance(getattr(watcher, "measuring", None), bool):
                watcher.measuring = on  # type: ignore[attr-defined]
