"""Results in SQLite: one file, nothing to start, saved as each trial finishes.

A run is one search of one workload with fixed settings; a trial row is written (and committed)
the moment its process ends, so ``kill -9`` of the tuner loses at most the trial in flight.
``--resume`` reopens the latest run of the same workload and replays the search over its rows.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchdoctor.errors import UserError
from torchdoctor.tune.trial import Trial, TrialResult

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workload TEXT NOT NULL,
    settings TEXT NOT NULL,
    started_at REAL NOT NULL,
    finding_ids TEXT
);
CREATE TABLE IF NOT EXISTS trials (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    phase TEXT NOT NULL,
    assignment TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT NOT NULL,
    finished_at REAL NOT NULL,
    PRIMARY KEY (run_id, key)
);
"""


class Store:
    """A SQLite file of tuning runs and their trials."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(self.path)
            self.db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise UserError(f"{self.path}: not a torchdoctor results file ({exc})") from None

    def close(self) -> None:
        """Close the connection (every trial is already committed)."""
        self.db.close()

    def new_run(self, workload: str, settings: dict[str, Any]) -> int:
        """Start a run for ``workload`` with ``settings``; returns its id."""
        cur = self.db.execute(
            "INSERT INTO runs (workload, settings, started_at) VALUES (?, ?, ?)",
            (workload, json.dumps(settings, sort_keys=True), time.time()),
        )
        self.db.commit()
        assert cur.lastrowid is not None
        return int(cur.lastrowid)

    def latest_run(self, workload: str) -> tuple[int, dict[str, Any]] | None:
        """The newest run of ``workload``: (id, settings), or None."""
        row = self.db.execute(
            "SELECT id, settings FROM runs WHERE workload = ? ORDER BY id DESC LIMIT 1", (workload,)
        ).fetchone()
        return None if row is None else (int(row[0]), json.loads(row[1]))

    def save_trial(self, run_id: int, seq: int, trial: Trial, result: TrialResult) -> None:
        """Write one finished trial and commit at once."""
        self.db.execute(
            "INSERT OR REPLACE INTO trials VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                trial.key,
                seq,
                trial.phase,
                json.dumps(trial.assignment, sort_keys=True),
                result.status,
                json.dumps(result.to_dict()),
                time.time(),
            ),
        )
        self.db.commit()

    def trials(self, run_id: int) -> dict[str, TrialResult]:
        """Finished trials of a run by key, marked ``resumed``."""
        out: dict[str, TrialResult] = {}
        for key, text in self.db.execute(
            "SELECT key, result FROM trials WHERE run_id = ? ORDER BY seq", (run_id,)
        ):
            result = TrialResult.from_dict(json.loads(text))
            result.resumed = True
            out[key] = result
        return out

    def trial_count(self, run_id: int) -> int:
        """Finished trials of a run."""
        return int(
            self.db.execute("SELECT COUNT(*) FROM trials WHERE run_id = ?", (run_id,)).fetchone()[0]
        )

    def finding_ids(self, run_id: int) -> list[str] | None:
        """The diagnosis recorded for a run, or None if none was recorded yet."""
        row = self.db.execute("SELECT finding_ids FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if row is None or row[0] is None else list(json.loads(row[0]))

    def save_finding_ids(self, run_id: int, ids: list[str]) -> None:
        """Record the diagnosis, so a resumed run orders its knobs the same way."""
        self.db.execute("UPDATE runs SET finding_ids = ? WHERE id = ?", (json.dumps(ids), run_id))
        self.db.commit()


class RunLock:
    """An exclusive lock on one run of a results file, held while this process measures it.

    Two ``--resume`` of one run at once would each re-run the missing trials, measure each
    other's load and write the same rows. The lock is an ``flock`` on a file beside the
    database: the kernel releases it when the holder dies, even by ``kill -9``, so a crashed
    tuner never leaves a run locked.
    """

    def __init__(self, db: Path, run_id: int) -> None:
        self.path = db.with_name(f"{db.name}.run{run_id}.lock")
        self._fh: Any = None
        self.run_id = run_id

    def acquire(self, workload: str) -> RunLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - no flock on this platform: no lock
            return self
        fh = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise UserError(
                f"run {self.run_id} of {workload} is being measured by {holder} right now; "
                "wait for it to finish (two at once would measure each other's load)"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"torchdoctor tune (pid {os.getpid()})")
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        if self._fh is not None:
            self._fh.close()  # closing drops the flock
            self._fh = None
            with contextlib.suppress(OSError):
                self.path.unlink()


class StoredRunner:
    """A trial runner that answers from the store when it can and saves every new result."""

    def __init__(self, store: Store, run_id: int, run: Callable[[Trial], TrialResult]) -> None:
        self.store, self.run_id, self._run = store, run_id, run
        self._done = store.trials(run_id)
        self._seq = store.trial_count(run_id)
        self.ran = 0
        """Trials this session actually ran (not replayed)."""

    def __call__(self, trial: Trial) -> TrialResult:
        """The stored result of ``trial`` if it finished before, else run it and save it."""
        if trial.key in self._done:
            return self._done[trial.key]
        result = self._run(trial)
        self.store.save_trial(self.run_id, self._seq, trial, result)
        self._seq += 1
        self.ran += 1
        self._done[trial.key] = result
        return result
