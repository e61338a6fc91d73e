"""Reading a run folder: its JSON files, checked for their schema, and the run's own record
(rank 0's under torchrun).

Every reader of a ``check`` run folder (``compare``, ``fix``) comes through here, so a record
from a newer torchdoctor, a file of another tool, or a rank path that leaves the folder gets the
same one-line error everywhere.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from torchdoctor.errors import UserError
from torchdoctor.inputs import input_path
from torchdoctor.record import layout
from torchdoctor.record.run import RunRecord
from torchdoctor.record.values import as_int, as_number


def read_json(path: Path) -> Any:
    """The JSON document in ``path``; a UserError naming the file when it is missing, not a
    regular file, unreadable or not JSON."""
    input_path(path, "JSON file")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not readable JSON ({exc})") from None
    except RecursionError:
        raise UserError(f"{path}: the JSON nests too deeply to be a torchdoctor file") from None


def check_schema(doc: dict[str, Any], where: str) -> None:
    """Refuse a record of another schema, or of a newer version than this code reads (a record
    with no schema field predates it and is read)."""
    schema = doc.get("schema")
    if schema is not None and schema != layout.RUN_SCHEMA:
        raise UserError(f"{where}: a {schema!r} document, not a torchdoctor run record")
    version = doc.get("schema_version")
    if version is None:
        return
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise UserError(f"{where}: 'schema_version' is not a version number")
    if version > layout.RUN_SCHEMA_VERSION:
        raise UserError(
            f"{where}: run record version {version} is newer than this torchdoctor reads "
            f"({layout.RUN_SCHEMA_VERSION}); upgrade torchdoctor to read it"
        )


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UserError(f"{where} is a {type(value).__name__}, not an object")
    return value


def read_run(folder: Path) -> RunRecord:
    """The run's record, typed: ``run.json``, or under torchrun (its ``ranks`` map) rank 0's own
    record, with the combined record's ``script`` when rank 0's lacks it. A rank path must
    stay inside the folder, and the steps section must hold what its readers time with (a
    list of step times, counts)."""
    record = _run_document(folder)
    _check_steps(record.get("steps"), folder)
    return RunRecord.from_dict(record)


def _run_document(folder: Path) -> dict[str, Any]:
    if not layout.is_run_folder(folder):
        raise UserError(f"{folder}: not a torchdoctor check run folder (no {layout.RUN})")
    where = str(layout.run_file(folder))
    run = _object(read_json(layout.run_file(folder)), where)
    check_schema(run, where)
    if "ranks" not in run:
        return run
    ranks = _object(run["ranks"], f"{where}: 'ranks'")
    name = ranks.get("0", str(layout.rank_record(Path(), 0)))
    if not isinstance(name, str):
        raise UserError(f"{where}: rank 0's record is not a file of the run folder")
    path = (folder / name).resolve()
    if not path.is_relative_to(folder.resolve()):
        raise UserError(f"{where}: rank 0's record is not a file of the run folder")
    record = _object(read_json(path), str(path))
    check_schema(record, str(path))
    if "script" not in record and "script" in run:
        record = {**record, "script": run["script"]}
    return record


def _check_steps(steps: Any, folder: Path) -> None:
    """A one-line error when the steps section is not the shape the writer gives it: an object,
    its ``step_ms`` finite non-negative numbers, its step counts counts (a missing one reads as
    empty)."""
    if steps is None:
        return
    if not isinstance(steps, dict):
        raise UserError(
            f"{folder}: the record's 'steps' is a {type(steps).__name__}, not an object"
        )
    times = steps.get("step_ms")
    if times is not None:
        where = f"{folder}: 'steps.step_ms'"
        if not isinstance(times, list) or not all(_is_time(v) for v in times):
            bad = "is not a list of numbers"
            if isinstance(times, list) and all(as_number(v) is not None for v in times):
                bad = "holds a negative, infinite or NaN time"
            raise UserError(f"{where} {bad}")
    for key in ("warmup_steps", "experiment_steps"):
        n = steps.get(key)
        if n is not None and (as_int(n) is None or n < 0):
            raise UserError(f"{folder}: 'steps.{key}' is not a count")


def _is_time(v: Any) -> bool:
    got = as_number(v)
    return got is not None and math.isfinite(got) and got >= 0
