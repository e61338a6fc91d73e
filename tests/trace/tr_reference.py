"""A brute-force reference for the loader: the expected table of an event list, via the json module.

Written from the loader's contract (TraceTable's docstrings and the notes it promises), one event
at a time in plain Python, so that it shares no code with ``torchdoctor.trace``.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

CATEGORY_KIND = {
    **dict.fromkeys(("cpu_op", "Operator", "operator"), 1),
    "user_annotation": 2,
    "python_function": 3,
    **dict.fromkeys(("cuda_runtime", "Runtime", "runtime", "xpu_runtime"), 4),
    "privateuse1_runtime": 4,
    **dict.fromkeys(("cuda_driver", "xpu_driver", "privateuse1_driver"), 5),
    **dict.fromkeys(("kernel", "Kernel"), 6),
    **dict.fromkeys(("gpu_memcpy", "Memcpy"), 7),
    **dict.fromkeys(("gpu_memset", "Memset"), 8),
    "gpu_user_annotation": 9,
    "cuda_sync": 10,
    "Trace": 11,
    "gpu_memory": 0,
}
GPU_KINDS = (6, 7, 8, 10)
INT64_MAX = 2**63 - 1
ARG_KEYS = {
    "corr": "correlation",
    "ext_id": "External id",
    "device": "device",
    "stream": "stream",
    "nbytes": "bytes",
}


def read_events(path: Path) -> tuple[dict[str, Any], list[Any]]:
    """(top-level keys without traceEvents, the events) of a trace file, by the json module."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    if isinstance(doc, list):
        return {}, doc
    return {k: v for k, v in doc.items() if k != "traceEvents"}, doc["traceEvents"]


def number(v: Any) -> float | None:
    """A JSON number (or numeric string) as float (inf past a double's range); None for
    anything else."""
    if type(v) is float:  # the common case, first
        return v
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def name_of(v: Any) -> str:
    """A name as the table keeps it: a string as it is, anything else as compact JSON."""
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def int_arg(args: Any, key: str) -> int:
    """An int64 argument: ints as they are, floats and numeric strings truncated, else -1."""
    v = args.get(key) if isinstance(args, dict) else None
    if type(v) is int and -INT64_MAX - 1 <= v <= INT64_MAX:  # the common case, first
        return v
    if isinstance(v, bool) or v is None:
        return -1
    if isinstance(v, int):
        return v if -INT64_MAX - 1 <= v <= INT64_MAX else -1
    f = number(v)
    if f is None or not math.isfinite(f) or abs(f) >= 2**63:
        return -1
    return int(f)


def ident(v: Any) -> int | str | None:
    return v if isinstance(v, int | str) and not isinstance(v, bool) else None


def stream_of(tid: Any) -> int:
    if isinstance(tid, int):
        return tid
    if isinstance(tid, str):
        digits = "".join(ch for ch in tid if ch.isdigit())
        return int(digits) if digits else -1
    return -1


def expected_rows(events: list[Any]) -> tuple[list[dict[str, Any]], int, int]:
    """(rows of the complete events in file order, malformed count, negative-duration count)."""
    rows, malformed, negative = [], 0, 0
    for ev in events:
        if not isinstance(ev, dict):
            malformed += 1
            continue
        if ev.get("ph") != "X":
            continue
        ts = number(ev.get("ts"))
        dur = number(ev.get("dur")) or 0.0
        # an event is placed in time only by finite numbers ("nan", 1e400, inf are not)
        if ts is None or not math.isfinite(ts + dur):
            malformed += 1
            continue
        if dur < 0:
            negative += 1
            dur = 0.0
        cat = ev.get("cat") if isinstance(ev.get("cat"), str) else None
        args = ev.get("args")
        row = {
            "ts": ts,
            "dur": dur,
            "cat": cat,
            "kind": CATEGORY_KIND.get(cat, 0),  # type: ignore[arg-type]
            "name": name_of(ev.get("name", "")),
            "pid": ident(ev.get("pid")),
            "tid": ident(ev.get("tid")),
            **{col: int_arg(args, key) for col, key in ARG_KEYS.items()},
        }
        if row["kind"] in GPU_KINDS:
            if row["stream"] < 0:
                row["stream"] = stream_of(row["tid"])
            if row["device"] < 0:
                pid = row["pid"]
                row["device"] = pid if isinstance(pid, int) and 0 <= pid < 64 else 0
        # int32 streams, int16 devices in the table (CUDA's 4294967295 reads back as -1)
        if not -(2**31) <= row["stream"] < 2**31 or not -(2**15) <= row["device"] < 2**15:
            row["stream"], row["device"] = wrap(row["stream"], 32), wrap(row["device"], 16)
        rows.append(row)
    return rows, malformed, negative


def wrap(v: int, bits: int) -> int:
    """``v`` cast to a signed integer of ``bits`` bits, as numpy's astype does."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def first_seen(values: list[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def expected_table(events: list[Any]) -> dict[str, Any]:
    """What ``load_trace`` must return for these events, field by field (decoded, not coded)."""
    rows, malformed, negative = expected_rows(events)
    order = sorted(range(len(rows)), key=lambda i: rows[i]["ts"])
    base = min((r["ts"] for r in rows), default=0.0)
    out: dict[str, Any] = {
        "names": first_seen([r["name"] for r in rows]),
        "pids": first_seen([r["pid"] for r in rows]),
        "tids": first_seen([r["tid"] for r in rows]),
        "malformed": malformed,
        "negative": negative,
        "unknown_cats": sorted(
            {r["cat"] for r in rows if r["cat"] and r["cat"] not in CATEGORY_KIND}
        ),
    }
    for col in ("ts", "dur", "kind", "name", "pid", "tid", *ARG_KEYS):
        out[col] = [rows[i][col] for i in order]
    out["ts"] = [t - base for t in out["ts"]]
    return out


def kind_counts(want: dict[str, Any]) -> dict[int, int]:
    """Complete events per kind code, from ``expected_table``'s result."""
    counts: dict[int, int] = {}
    for k in want["kind"]:
        counts[k] = counts.get(k, 0) + 1
    return counts


def memory_count(events: list[Any]) -> int:
    """``[memory]`` instant events with a usable timestamp."""
    return sum(
        1
        for e in events
        if isinstance(e, dict)
        and e.get("ph") == "i"
        and e.get("name") == "[memory]"
        and (ts := number(e.get("ts"))) is not None
        and math.isfinite(ts)
    )


def table_fields(table: Any) -> dict[str, Any]:
    """The same fields as ``expected_table``, read back from a TraceTable (codes decoded)."""
    notes = " | ".join(table.notes)
    return {
        "names": list(table.names),
        "pids": list(table.pids),
        "tids": list(table.tids),
        "ts": table.ts.tolist(),
        "dur": table.dur.tolist(),
        "kind": table.kind.tolist(),
        "name": [table.names[c] for c in table.name.tolist()],
        "pid": [table.pids[c] for c in table.pid.tolist()],
        "tid": [table.tids[c] for c in table.tid.tolist()],
        **{col: getattr(table, col).tolist() for col in ARG_KEYS},
        "notes": notes,
    }


def assert_matches(table: Any, events: list[Any]) -> dict[str, Any]:
    """Assert every column of ``table`` equals the brute-force expectation; return the latter."""
    want = expected_table(events)
    got = table_fields(table)
    for key in ("names", "pids", "tids", "kind", "name", "pid", "tid", "dur", *ARG_KEYS):
        assert got[key] == want[key], key
    assert len(got["ts"]) == len(want["ts"])
    for a, b in zip(got["ts"], want["ts"], strict=True):
        assert a == b or math.isclose(a, b, rel_tol=0, abs_tol=1e-6 * max(1.0, abs(b))), (a, b)
    notes = got["notes"]
    assert (f"clamped {want['negative']} negative durations" in notes) == bool(want["negative"])
    assert (f"skipped {want['malformed']} malformed events" in notes) == bool(want["malformed"])
    for cat in want["unknown_cats"][:5]:
        assert cat in notes
    return want
