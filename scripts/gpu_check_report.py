"""The GPU check's three files: what comes back from the machine is at most a few files, so the
whole run is folded into ``OUT/summary.txt``, ``OUT/verdicts.json`` and ``OUT/evidence.tar.gz``.

    python scripts/gpu_check_report.py WORK OUT

Reads ``WORK/verdicts/<section>.json`` (written by the judges), ``WORK/status/<group>.json``
(written by gpu_check.sh per process: exit status, seconds, limit, or skipped) and
``WORK/meta.json``. A section whose process ran out of time or died before its verdict is a
TIMEOUT or FAIL, never silently absent. The tarball holds logs, verdicts and run records (no
traces, snapshots or checkpoints) and stays under 16 MiB by trimming the longest logs to their
ends. Pure Python: no torch.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

# (section, the process group that produces its verdict), in the order the script runs them.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("env", "env"),
    ("analyze", "analyze"),
    ("syncs", "syncs"),
    ("tf32", "tf32"),
    ("oom", "oom"),
    ("oom-caught", "oom-caught"),
    ("precision", "runtime"),
    ("meter", "runtime"),
    ("prefetch", "runtime"),
    ("fp16", "runtime"),
    ("memory-history", "runtime"),
    ("tune-loop", "runtime"),
    ("ddp", "dist"),
    ("fsdp", "dist"),
    ("ddp-check", "ddp-check"),
    ("kernels", "kernels"),
    ("probe", "probe"),
    ("tune", "tune"),
    ("compile", "compile"),
)
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(g for _, g in SECTIONS))
MAX_TAR_BYTES = 15 * 2**20  # under the 16 MiB a returned file may have
_KEEP_NAMES = ("run.json", "report.json", "memory_summary.txt", "tune.json", "meta.json")
_KEEP_SUFFIXES = (".log", ".txt")


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        return None


def section_rows(work: Path, only: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per section whose group the run reached (and, with ``only``, that is named in
    it or whose group is): result, seconds, the figure that decided it, the verdict."""
    rows = []
    for name, group in SECTIONS:
        status = _load(work / "status" / f"{group}.json")
        if status is None or (only and name not in only and group not in only):
            continue  # not selected (GPU_CHECK_ONLY)
        v = _load(work / "verdicts" / f"{name}.json")
        if status.get("status") == "skipped":
            result, figure = "SKIPPED", "out of time before it started"
        elif v is not None:
            result, figure = ("PASS" if v.get("pass") else "FAIL"), str(v.get("figure", ""))
        elif status.get("status") == "timeout":
            result, figure = "TIMEOUT", f"no verdict within {status.get('limit')} s"
        else:
            result, figure = "FAIL", f"no verdict (exit {status.get('rc')}; see {group}.log)"
        seconds = (v or {}).get("seconds", status.get("seconds"))
        rows.append(
            {
                "section": name,
                "group": group,
                "result": result,
                "seconds": seconds,
                "figure": figure,
                "process": status,
                "verdict": v,
            }
        )
    return rows


def summary_text(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """summary.txt: a header, one line per section (result, seconds, deciding figure), a total."""
    head = [
        f"# torchdoctor gpu_check {meta.get('started', '?')} "
        f"{'DRY RUN (no GPU; faked inputs) ' if meta.get('dry') else ''}"
        f"deadline {meta.get('deadline_s')} s, commit {meta.get('commit', '?')}",
        f"# pip: {meta.get('pip', 'not run')}",
    ]
    lines = []
    for r in rows:
        secs = r["seconds"]
        secs_text = f"{float(secs):6.1f}s" if isinstance(secs, int | float) else "     -s"
        lines.append(f"{r['section']:<15} {r['result']:<8}{secs_text}  {r['figure']}")
    passed = sum(r["result"] == "PASS" for r in rows)
    tail = f"# {passed}/{len(rows)} sections passed in {meta.get('elapsed_s', '?')} s"
    return "\n".join([*head, *lines, tail]) + "\n"


_SKIP_DIRS = frozenset(
    {
        "inductor-cache",
        "triton-cache",
        "cuda-cache",
        "site",
        "site-dry",
        "analyze",
        "memory-history",
    }
)


def _wanted(rel: Path) -> bool:
    if rel.parts[0] in _SKIP_DIRS:  # caches, installed wheels, traces, snapshots
        return False
    if rel.parts[0] in ("verdicts", "status"):
        return rel.suffix == ".json"
    name = rel.name
    return (
        name in _KEEP_NAMES
        or rel.suffix in _KEEP_SUFFIXES
        or (name.startswith("rank") and name.endswith(".json"))
        or name == "oom-memory.json"
    )


def _evidence_files(work: Path) -> list[Path]:
    """Logs, verdicts, process statuses and run records under ``work``: never traces, pickles,
    checkpoints or caches."""
    return [p for p in sorted(work.rglob("*")) if p.is_file() and _wanted(p.relative_to(work))]


def write_tar(work: Path, target: Path, budget: int = MAX_TAR_BYTES) -> dict[str, Any]:
    """Logs, verdicts and run records, each log trimmed to its end if the whole would pass
    ``budget`` bytes; returns what went in."""
    files = _evidence_files(work)
    sizes = {p: p.stat().st_size for p in files}
    cap = None
    if sum(sizes.values()) > budget:  # trim the longest files to their last ``cap`` bytes
        cap = max(4096, budget // max(1, len(files)))
    with tarfile.open(target, "w:gz") as tar:
        for path in files:
            data = path.read_bytes()
            if cap is not None and len(data) > cap:
                data = b"[... trimmed ...]\n" + data[-cap:]
            info = tarfile.TarInfo(str(Path("gpu-check") / path.relative_to(work)))
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return {"files": len(files), "bytes": target.stat().st_size, "trimmed_to": cap}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: gpu_check_report.py WORK OUT", file=sys.stderr)
        return 2
    work, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    meta = _load(work / "meta.json") or {}
    rows = section_rows(work, [n for n in str(meta.get("only") or "").split(",") if n])
    text = summary_text(rows, meta)
    (out / "summary.txt").write_text(text)
    merged = {
        "meta": meta,
        "sections": {r["section"]: {k: v for k, v in r.items() if k != "section"} for r in rows},
    }
    (out / "verdicts.json").write_text(json.dumps(merged, indent=2, default=str))
    tar = write_tar(work, out / "evidence.tar.gz")
    sys.stdout.write(text)
    print(f"# evidence.tar.gz: {tar['files']} files, {tar['bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
