"""Map a function over a file's chunks, in order, with the help of one forked process.

Decoding JSON holds the GIL, so threads cannot share the work; a forked child can, and it inherits
the imported modules for free. The helper is sent nothing: it opens the file itself and cuts the
same chunks (inflating 50 MB of gzip costs it 20 ms, less than piping the bytes over from a busy
process would). Both processes walk the chunks in order and claim each one in a table of flags
they share; whoever gets to a chunk first computes it, so the work splits itself by speed and a
helper that gets no CPU costs the main process nothing but its claims. The helper puts each
result in shared memory and says where through a pipe; the main process yields every result in
input order and frees the memory it has read. If the helper fails in any way, the main process
computes its chunks itself, so the result never depends on the helper.
Only where ``os.fork`` exists and a CPU is idle; elsewhere everything runs in-process.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import struct
from collections import deque
from collections.abc import Callable, Generator, Iterable
from typing import Any

from torchdoctor.trace.reader import Skipped, chunk_bytes

ENV_PARALLEL = "TORCHDOCTOR_PARALLEL_LOAD"
"""0: load traces in one process; 1: always use a helper (where fork exists); unset: decide."""
_SLOTS = 1 << 16  # chunks the helper may claim (256 GB of JSON at 4 MiB a chunk)
_MAIN, _HELPER = 1, 2
_STALL_S = 60.0  # seconds the main process waits for one chunk before doing it itself
_MSG = struct.Struct("<qqqq")  # chunk index, offset in the arena, length (-1: failed), chunk bytes
_PENDING = object()
_FAILED = object()


def parallel_available() -> bool:
    """Whether a forked helper can help: fork exists, not switched off, and a CPU is idle.

    A helper adds CPU (it reads the file too, and results are pickled across), which pays off
    only when it runs on a core of its own; on a machine whose run queue already fills every
    core (1-minute load average) it would only slow everything else down.
    """
    choice = os.environ.get(ENV_PARALLEL, "")
    if choice == "0" or not hasattr(os, "fork"):
        return False
    if choice == "1":
        return True
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS has no sched_getaffinity
        cpus = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average on this platform
        busy = 0.0
    return cpus >= 2 and busy < cpus - 0.5


class Helper:
    """A forked child computing ``fn`` on the chunks of ``source()`` that it claims first.

    ``source`` must give the same chunks in the child as the main process's iterable gives it
    (the file read again); a result whose chunk length differs is recomputed by the main process.
    """

    def __init__(self, fn: Callable[[bytearray], Any] | str, arena_bytes: int) -> None:
        self.fn = fn
        self.pid = -1
        self.alive = False
        self._claims = mmap.mmap(-1, _SLOTS)
        self._arena = mmap.mmap(-1, max(arena_bytes, mmap.PAGESIZE))
        self._msgs = bytearray()
        self._ready: dict[int, tuple[int, int, int]] = {}  # index -> (offset, length, chunk bytes)
        self._rfd = -1

    def start(self, source: Callable[[], Iterable[bytearray | Skipped]]) -> Helper:
        rfd, wfd = os.pipe()
        import warnings

        with warnings.catch_warnings():
            # Python 3.12+ warns about fork in a process with threads; the child only reads the
            # file and computes, it takes no lock another thread could hold.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child, which exits via os._exit
            os.close(rfd)
            _child_main(self.fn, source, self._claims, self._arena, wfd)
        os.close(wfd)
        self.pid, self._rfd, self.alive = pid, rfd, True
        return self

    def taken(self, index: int) -> bool:
        """Whether the helper has claimed chunk ``index`` (so the main process need not copy it)."""
        return index < _SLOTS and not self._claims.closed and self._claims[index] == _HELPER

    def claim(self, index: int) -> bool:
        """True if the main process should compute chunk ``index`` (the helper has not)."""
        if index >= _SLOTS or self._claims.closed:
            return True
        if self._claims[index]:  # the helper's (even if it has exited since: it may have sent it)
            return False
        # A race with the helper claiming the same chunk now costs one duplicate result, which
        # collect() drops: the main process never waits for a chunk it saw unclaimed.
        self._claims[index] = _MAIN
        return True

    def collect(self, pending: deque[list[Any]], block: bool) -> None:
        """Fill in the pending entries ``[index, chunk, result]`` the helper has finished; with
        ``block``, wait until the oldest is settled (by the helper, or as failed if it died)."""
        self._read_messages(wait=False)
        while True:
            for entry in pending:
                if entry[2] is _PENDING:
                    entry[2] = self._result(entry[0], len(entry[1]))
            if not block or not pending or pending[0][2] is not _PENDING:
                return
            self._read_messages(wait=True)

    def _result(self, index: int, chunk_bytes: int) -> Any:
        where = self._ready.pop(index, None)
        if where is None:  # not sent yet; never, if the helper has exited
            return _PENDING if self.alive else _FAILED
        offset, length, size = where
        if length < 0 or size != chunk_bytes:
            return _FAILED  # the helper's fn raised, or it read a different file
        try:
            value = pickle.loads(self._arena[offset : offset + length])
        except Exception:  # pragma: no cover - the helper wrote what it pickled
            value = _FAILED
        self._free(offset, length)
        return value

    def _free(self, offset: int, length: int) -> None:
        """Give the arena's pages of a read result back to the system."""
        remove = getattr(mmap, "MADV_REMOVE", None)
        if remove is not None and length > 0:
            with contextlib.suppress(OSError):
                self._arena.madvise(remove, offset, length)

    def _read_messages(self, wait: bool) -> None:
        import select

        if not self.alive:
            return
        if not select.select([self._rfd], [], [], _STALL_S if wait else 0)[0]:
            if wait:  # a chunk takes milliseconds: a helper this late is stuck, do it here
                _kill(self.pid)
                self.alive = False
            return
        data = os.read(self._rfd, _MSG.size * 256)
        if not data:  # the helper exited: what it has not sent, the main process computes
            self.alive = False
            return
        self._msgs += data
        whole = len(self._msgs) - len(self._msgs) % _MSG.size
        for index, offset, length, size in _MSG.iter_unpack(self._msgs[:whole]):
            self._ready[index] = (offset, length, size)
        del self._msgs[:whole]

    def close(self) -> None:
        """Stop the helper (its work is done or moot) and release what it shared."""
        if self.pid > 0:
            _kill(self.pid)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = -1
        if self._rfd >= 0:
            os.close(self._rfd)
            self._rfd = -1
        self.alive = False
        self._ready.clear()
        self._claims.close()
        self._arena.close()


def start_helper(
    fn: Callable[[bytearray], Any] | str,
    source: Callable[[], Iterable[bytearray | Skipped]],
    arena_bytes: int,
) -> Helper | None:
    """A running helper, or None where one cannot help (see ``parallel_available``)."""
    if not parallel_available():
        return None
    try:
        return Helper(fn, arena_bytes).start(source)
    except OSError:  # no memory for the arena, no process left: work alone
        return None


def ordered_map(
    fn: Callable[[bytearray], Any],
    chunks: Iterable[bytearray | Skipped],
    helper: Helper | None = None,
) -> Generator[tuple[bytearray | Skipped, Any], None, None]:
    """Yield ``(chunk, fn(chunk))`` in input order, sharing the work with ``helper`` if given;
    the helper is closed when the generator finishes or is closed."""
    if helper is None:
        yield from ((c, fn(chunk_bytes(c))) for c in chunks)
        return
    try:
        pending: deque[list[Any]] = deque()  # [index, chunk, result or _PENDING], oldest first
        for index, chunk in enumerate(chunks):
            mine = helper.claim(index)
            pending.append([index, chunk, fn(chunk_bytes(chunk)) if mine else _PENDING])
            helper.collect(pending, block=False)
            while pending and pending[0][2] is not _PENDING:
                yield _settle(fn, pending.popleft())
        while pending:
            helper.collect(pending, block=True)
            yield _settle(fn, pending.popleft())
    finally:
        helper.close()


def _settle(fn: Callable[[bytearray], Any], entry: list[Any]) -> tuple[bytearray | Skipped, Any]:
    """The entry's result, computed here if the helper could not deliver it (a skipped chunk's
    bytes are not here: ``NeedBytes`` tells the caller to read again)."""
    _, chunk, result = entry
    return chunk, fn(chunk_bytes(chunk)) if result is _FAILED else result


def _child_main(  # pragma: no cover - runs in the forked child
    fn: Callable[[bytearray], Any] | str,
    source: Callable[[], Iterable[bytearray | Skipped]],
    claims: mmap.mmap,
    arena: mmap.mmap,
    wfd: int,
) -> None:
    status, pos, page = 0, 0, mmap.PAGESIZE
    try:
        if isinstance(fn, str):  # "module:function", imported here rather than before the fork
            import importlib

            module, name = fn.split(":")
            fn = getattr(importlib.import_module(module), name)
        assert callable(fn)
        for index, chunk in enumerate(source()):
            if index >= _SLOTS:
                break
            if claims[index]:
                continue
            claims[index] = _HELPER
            try:
                payload = pickle.dumps(fn(chunk_bytes(chunk)), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # the main process recomputes this chunk and sees the error itself
                os.write(wfd, _MSG.pack(index, 0, -1, len(chunk)))
                continue
            if pos + len(payload) > len(arena):
                os.write(wfd, _MSG.pack(index, 0, -1, len(chunk)))
                break  # the arena is full: the main process does the rest
            arena[pos : pos + len(payload)] = payload
            os.write(wfd, _MSG.pack(index, pos, len(payload), len(chunk)))
            pos = -(-(pos + len(payload)) // page) * page  # each result starts on a page
    except BaseException:
        status = 1  # a bad file: the main process reads it too and reports the error
    finally:
        os._exit(status)


def _kill(pid: int) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
