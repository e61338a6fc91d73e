"""The run folder: ``torchdoctor-runs/<script>-<time>/``, shared by every rank of a torchrun job.

Layout (one process): ``run.json``, ``trace.json.gz``, ``report.txt``, ``report.json``.
Under torchrun each rank writes ``ranks/rank<R>.json`` and ``traces/rank<R>.json.gz``; rank 0
then writes the combined ``run.json`` and the report. Ranks agree on the folder through a small
pointer file written by local rank 0, keyed by the torchrun agent's pid (ranks share files,
never collectives, so a rank that crashed cannot hang the others).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchdoctor.errors import UserError
from torchdoctor.record import layout


@dataclass(frozen=True)
class RankInfo:
    """This process's place in a torchrun job (rank 0 of 1 outside one)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> RankInfo:
        """Read ``RANK`` / ``LOCAL_RANK`` / ``WORLD_SIZE`` as torchrun sets them."""
        env = dict(os.environ) if env is None else env
        try:
            return cls(
                rank=int(env.get("RANK", "0")),
                local_rank=int(env.get("LOCAL_RANK", "0")),
                world_size=int(env.get("WORLD_SIZE", "1")),
            )
        except ValueError as exc:
            raise UserError(f"malformed torchrun environment: {exc}") from None

    @property
    def distributed(self) -> bool:
        """True under torchrun with more than one process."""
        return self.world_size > 1


def _create_unique(parent: Path, stem: str) -> Path:
    base = f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    for i in range(1000):
        path = parent / (base if i == 0 else f"{base}-{i + 1}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
    raise UserError(f"cannot create a run folder under {parent}")


def _pointer(parent: Path, env: dict[str, str]) -> Path:
    key = "-".join(
        [str(os.getppid()), env.get("MASTER_PORT", ""), env.get("TORCHELASTIC_RESTART_COUNT", "0")]
    )
    return parent / f".pending-{key}"


def create_run_folder(
    out_dir: str, script: str, rank: RankInfo, env: dict[str, str] | None = None
) -> Path:
    """Create (or, on ranks other than local rank 0, find) this run's folder."""
    env = dict(os.environ) if env is None else env
    parent = Path(out_dir)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {parent}: {exc}") from None
    stem = Path(script).stem or "script"
    if not rank.distributed:
        return _create_unique(parent, stem)
    pointer = _pointer(parent, env)
    if rank.local_rank == 0:
        folder = _create_unique(parent, stem)
        tmp = pointer.with_suffix(".tmp")
        tmp.write_text(folder.name, encoding="utf-8")
        tmp.replace(pointer)  # atomic: readers never see a half-written name
        return folder
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        if pointer.exists():
            return parent / pointer.read_text(encoding="utf-8").strip()
        time.sleep(0.05)
    raise UserError(f"local rank 0 did not create a run folder under {parent} within 60 s")


def rank_result_path(folder: Path, rank: RankInfo) -> Path:
    """Where this process writes its ``run.json``-shaped record."""
    return layout.record_file(folder, rank.rank, rank.distributed)


def trace_path(folder: Path, rank: RankInfo) -> Path:
    """Where this process writes its trace (one folder of per-rank traces under torchrun)."""
    return layout.trace_file(folder, rank.rank, rank.distributed)


def write_json(path: Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as indented JSON atomically (other ranks poll for these files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    tmp.replace(path)
    return path


def wait_for_ranks(folder: Path, world_size: int, timeout_s: float) -> dict[int, dict[str, Any]]:
    """Read every rank's record, waiting up to ``timeout_s`` seconds for late ones."""
    deadline = time.monotonic() + timeout_s
    found: dict[int, dict[str, Any]] = {}
    while True:
        for r in range(world_size):
            path = layout.rank_record(folder, r)
            if r not in found and path.exists():
                try:
                    found[r] = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
        if len(found) == world_size or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


def release_pointer(out_dir: str, rank: RankInfo, env: dict[str, str] | None = None) -> None:
    """Remove the folder pointer once every rank has found the folder (rank 0, at the end)."""
    env = dict(os.environ) if env is None else env
    if rank.distributed and rank.local_rank == 0:
        _pointer(Path(out_dir), env).unlink(missing_ok=True)
