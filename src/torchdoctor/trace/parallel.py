"""Map a function over a stream of byte chunks with the help of one forked worker process.

Decoding JSON holds the GIL, so threads cannot share it; a forked child can, and it inherits the
imported modules for free. The main process keeps producing chunks (reading, inflating, cutting)
and computes some itself; it hands a chunk to the worker while the worker has fewer than
``_IN_FLIGHT`` unfinished. Results come back in input order. If the worker fails in any way, the
main process computes the worker's chunks itself, so the result never depends on the worker.
Only on platforms with ``os.fork`` and two or more CPUs; elsewhere everything runs in-process.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

_IN_FLIGHT = 2
_HEADER_BYTES = 8  # each message is preceded by its length, little-endian
_PENDING = object()
_FAILED = object()
ENV_PARALLEL = "TORCHDOCTOR_PARALLEL_LOAD"
"""0: load traces in one process; 1: always use a worker (where fork exists); unset: decide."""


def parallel_available() -> bool:
    """Whether a forked worker can help: fork exists, not switched off, and a CPU is idle.

    A worker adds about 15% CPU (sending chunks, pickling columns back), which pays off only
    when it runs on a core of its own; on a machine whose run queue already fills every core
    (1-minute load average) it would only slow the load down.
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


def ordered_map(
    fn: Callable[[bytearray], Any], chunks: Iterable[bytearray], parallel: bool = True
) -> Generator[tuple[bytearray, Any], None, None]:
    """Yield ``(chunk, fn(chunk))`` in input order; a worker is forked at the second chunk."""
    it = iter(chunks)
    head = list(itertools.islice(it, 2))
    if len(head) < 2 or not (parallel and parallel_available()):
        yield from ((c, fn(c)) for c in itertools.chain(head, it))
        return
    with _Worker(fn) as worker:
        yield from _run(fn, worker, itertools.chain(head, it))


def _run(
    fn: Callable[[bytearray], Any], worker: _Worker, chunks: Iterator[bytearray]
) -> Iterator[tuple[bytearray, Any]]:
    pending: deque[list[Any]] = deque()  # [chunk, result or _PENDING], oldest first
    for chunk in chunks:
        if worker.alive and worker.in_flight < _IN_FLIGHT:
            worker.submit(chunk)
            pending.append([chunk, _PENDING])
        else:
            pending.append([chunk, fn(chunk)])
        worker.collect(pending, block=False)
        while pending and pending[0][1] is not _PENDING:
            yield _settle(fn, pending.popleft())
    while pending:
        worker.collect(pending, block=True)
        yield _settle(fn, pending.popleft())


def _settle(fn: Callable[[bytearray], Any], entry: list[Any]) -> tuple[bytearray, Any]:
    """The entry's result, computed here if the worker could not deliver it."""
    chunk, result = entry
    return chunk, fn(chunk) if result is _FAILED else result


class _Worker:
    """A forked child computing ``fn`` on chunks sent through a pipe, in order."""

    def __init__(self, fn: Callable[[bytearray], Any]) -> None:
        self.fn = fn
        self.alive = False
        self.in_flight = 0
        self.pid = -1

    def __enter__(self) -> _Worker:
        to_child, self._to_child_w = os.pipe()
        self._from_child_r, from_child = os.pipe()
        # Imported here, not at the top: most traces fit one chunk and never need a worker,
        # and ``torchdoctor analyze`` should not pay for these imports then.
        import queue
        import threading
        import warnings

        with warnings.catch_warnings():
            # Python 3.12+ warns about fork in a process with threads; the child below only
            # decodes bytes and exits, it takes no lock another thread could hold.
            warnings.simplefilter("ignore", DeprecationWarning)
            self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - runs in the child, which exits via os._exit
            os.close(self._to_child_w)
            os.close(self._from_child_r)
            _child_loop(self.fn, to_child, from_child)
        os.close(to_child)
        os.close(from_child)
        self.alive = True
        # Writes go through a thread so a busy child never blocks the main thread.
        self._outbox: queue.Queue[bytearray | None] = queue.Queue()
        self._sender = threading.Thread(target=self._send_loop, daemon=True)
        self._sender.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:  # stopped early (bad input, interrupt): the child's work is moot
            _kill(self.pid)
        self._outbox.put(None)
        self._sender.join()
        os.close(self._from_child_r)
        os.waitpid(self.pid, 0)

    def submit(self, chunk: bytearray) -> None:
        self.in_flight += 1
        self._outbox.put(chunk)

    def _send_loop(self) -> None:
        fd = self._to_child_w
        try:
            while (chunk := self._outbox.get()) is not None:
                _write_all(fd, len(chunk).to_bytes(_HEADER_BYTES, "little"))
                _write_all(fd, chunk)
        except OSError:
            pass  # the child died; collect() notices the closed result pipe
        finally:
            os.close(fd)

    def collect(self, pending: deque[list[Any]], block: bool) -> None:
        """Fill in the oldest pending results the child has sent (waiting if ``block``)."""
        for entry in pending:
            if entry[1] is not _PENDING:
                continue
            if not self.alive:
                entry[1] = _FAILED
                continue
            if not block and not _readable(self._from_child_r):
                return
            entry[1] = self._receive()
            block = False

    def _receive(self) -> Any:
        import pickle

        try:
            size = int.from_bytes(_read_exact(self._from_child_r, _HEADER_BYTES), "little")
            ok, value = pickle.loads(_read_exact(self._from_child_r, size))
        except (OSError, EOFError, pickle.UnpicklingError):
            ok, value = False, None
        self.in_flight -= 1
        if not ok:
            self.alive = False
            return _FAILED
        return value


def _child_loop(fn: Callable[[bytearray], Any], rfd: int, wfd: int) -> None:  # pragma: no cover
    import pickle

    status = 0
    try:
        while True:
            size = int.from_bytes(_read_exact(rfd, _HEADER_BYTES), "little")
            chunk = _read_exact(rfd, size)
            try:
                msg = pickle.dumps((True, fn(chunk)), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # the parent recomputes this chunk and sees the error itself
                msg = pickle.dumps((False, None))
            _write_all(wfd, len(msg).to_bytes(_HEADER_BYTES, "little"))
            _write_all(wfd, msg)
    except EOFError:
        pass  # the parent closed the pipe: no more chunks
    except BaseException:
        status = 1
    finally:
        os._exit(status)


def _read_exact(fd: int, n: int) -> bytearray:
    """Exactly ``n`` bytes from a pipe, read in place (no joining of parts)."""
    buf = bytearray(n)
    view, pos = memoryview(buf), 0
    while pos < n:
        got = os.readv(fd, [view[pos:]])
        if not got:
            raise EOFError
        pos += got
    return buf


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _readable(fd: int) -> bool:
    import select

    return bool(select.select([fd], [], [], 0)[0])


def _kill(pid: int) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
