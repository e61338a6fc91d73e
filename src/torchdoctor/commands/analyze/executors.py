"""Where per-rank tasks run: in this process, in a local process pool, or on a Dask cluster.

Each executor runs one function over a list of paths and yields the results as they finish, so
the caller can keep only what it needs (a summary) and let the rest go. Dask is imported only
when asked for (``--dask`` / ``--scheduler``); the default needs nothing beyond the standard
library.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from torchdoctor.errors import UserError


class Executor(Protocol):
    """Runs ``fn(item)`` for every item; results arrive in completion order."""

    workers: int

    def map_unordered(self, fn: Callable[[str], Any], items: list[str]) -> Iterator[Any]: ...

    def call(self, fn: Callable[[str], Any], item: str) -> Any:
        """One task, run where the files are; its result comes back to this process."""
        ...

    def close(self) -> None: ...


class SerialExecutor:
    """Everything in this process, one item at a time (``--jobs 1``)."""

    workers = 1

    def map_unordered(self, fn: Callable[[str], Any], items: list[str]) -> Iterator[Any]:
        return (fn(item) for item in items)

    def call(self, fn: Callable[[str], Any], item: str) -> Any:
        return fn(item)

    def close(self) -> None:
        pass


class LocalPool:
    """A pool of worker processes on this machine, one task (one rank's trace) each at a time.

    Workers are forked where the platform allows it (the analysis modules are imported once, in
    the parent), else spawned.
    """

    def __init__(self, jobs: int) -> None:
        import multiprocessing
        import warnings
        from concurrent.futures import ProcessPoolExecutor

        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        self.workers = jobs
        with warnings.catch_warnings():
            # 3.12+ warns about fork with threads; workers only read files and compute
            warnings.simplefilter("ignore", DeprecationWarning)
            self._pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context(method))

    def map_unordered(self, fn: Callable[[str], Any], items: list[str]) -> Iterator[Any]:
        from concurrent.futures import as_completed

        futures = [self._pool.submit(fn, item) for item in items]
        return (f.result() for f in as_completed(futures))

    def call(self, fn: Callable[[str], Any], item: str) -> Any:
        return fn(item)  # the files are here: no need to ship the result between processes

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)


class DaskExecutor:
    """Tasks on a Dask cluster: the one at ``address``, or a local one with ``jobs`` workers."""

    def __init__(self, address: str | None, jobs: int) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise UserError(
                "--dask/--scheduler need dask.distributed: pip install 'torchdoctor[dask]'"
            ) from None
        self._cluster = None
        try:
            if address:
                # Dask retries a refused connection until this timeout: 10 s, or Dask's own
                # setting where its environment variable sets one.
                timeout = os.environ.get("DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT", "10s")
                self._client = Client(address, timeout=timeout)
            else:
                self._cluster = LocalCluster(
                    n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None
                )
                self._client = Client(self._cluster)
        except (OSError, TimeoutError) as exc:
            raise UserError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
        self.workers = max(len(self._client.scheduler_info().get("workers", {})), 1)

    def map_unordered(self, fn: Callable[[str], Any], items: list[str]) -> Iterator[Any]:
        from distributed import as_completed

        futures = self._client.map(fn, items, pure=False)
        for future in as_completed(futures):
            yield future.result()
            future.release()  # the cluster may forget it now

    def call(self, fn: Callable[[str], Any], item: str) -> Any:
        return self._client.submit(fn, item, pure=False).result()

    def close(self) -> None:
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()


def make_executor(jobs: int | None, scheduler: str | None, use_dask: bool, tasks: int) -> Executor:
    """The executor the options ask for; ``jobs`` defaults to the CPUs (at most one per task)."""
    from torchdoctor.capture.cpu_usage import usable_cores

    n = max(1, min(jobs or usable_cores(), tasks))
    if scheduler or use_dask:
        return DaskExecutor(scheduler, n)
    return SerialExecutor() if n == 1 else LocalPool(n)
