"""Verdicts for the GPU check: read a ``torchdoctor check`` run folder and say, per expectation,
whether the GPU path did what it must. Prints one JSON object; exit 0 when every expectation
holds, 1 when one fails, 2 when there is no run folder to read.

    python scripts/gpu_check_verify.py KIND RUNS_DIR CASE_SCRIPT

KIND: syncs | oom | oom-caught | tf32 | ddp. RUNS_DIR is the ``--out`` folder of the check run
(its newest run folder is read). Pure Python: no torch import, so it runs anywhere.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

Checks = dict[str, bool]


def newest_run(runs_dir: Path) -> Path | None:
    """The most recently modified run folder under ``runs_dir`` (None when there is none)."""
    folders = [p for p in runs_dir.iterdir() if p.is_dir()] if runs_dir.is_dir() else []
    return max(folders, key=lambda p: p.stat().st_mtime) if folders else None


def read_record(folder: Path) -> dict[str, Any]:
    """``run.json``, or rank 0's record under torchrun."""
    for path in (folder / "run.json", folder / "ranks" / "rank0.json"):
        if path.is_file():
            data: dict[str, Any] = json.loads(path.read_text())
            return data
    return {}


def line_of(script: Path, text: str) -> str:
    """ "path:line" of the first line of ``script`` containing ``text``."""
    for number, line in enumerate(script.read_text().splitlines(), start=1):
        if text in line:
            return f"{script.resolve()}:{number}"
    raise ValueError(f"{text!r} not in {script}")


def resolved(site: str) -> str:
    """ "file:line" with the file's path resolved (the run records the path as given)."""
    path, _, line = str(site).rpartition(":")
    return f"{Path(path).resolve()}:{line}" if path else str(site)


def _sites(run: dict[str, Any]) -> list[str]:
    return [resolved(s["site"]) for s in (run.get("syncs") or {}).get("sync_debug", [])]


def _first_block(blocks: list[dict[str, Any]]) -> str:
    return resolved(blocks[0].get("where", "")) if blocks else ""


def _nvml(run: dict[str, Any]) -> dict[str, Any]:
    return ((run.get("gpu") or {}).get("nvml")) or {}


def _complete(run: dict[str, Any]) -> Checks:
    return {"record is complete (no internal error)": bool(run) and "error" not in run}


def check_syncs(run: dict[str, Any], script: Path) -> Checks:
    sites = _sites(run)
    return {
        **_complete(run),
        "NVML sampled >= 2 times without error": _nvml(run).get("samples", 0) >= 2
        and not _nvml(run).get("error"),
        "sync-debug sites found": bool(sites),
        "every site is in the script (not torch, not torchdoctor)": bool(sites)
        and all(s.rsplit(":", 1)[0] == str(script.resolve()) for s in sites),
        "GradScaler's sync blamed on scaler.step": line_of(script, "scaler.step(opt)") in sites,
        "the user's .item() found": line_of(script, "loss.item()") in sites,
    }


def check_oom(run: dict[str, Any], script: Path, folder: Path) -> Checks:
    oom = run.get("oom") or {}
    blocks = oom.get("largest_blocks") or []
    snapshot = folder / str(oom.get("snapshot_file", "-"))
    return {
        **_complete(run),
        "the script's OOM is recorded": bool(oom) and run.get("exit", {}).get("status") == "error",
        "snapshot written": snapshot.is_file() and snapshot.stat().st_size > 0,
        "taken by the OOM observer": oom.get("snapshot_at") == "oom observer",
        "largest block located at the script's line": _first_block(blocks)
        == line_of(script, "torch.empty(2**30"),
        "memory read on the OOM's device": oom.get("device") == 0 and bool(oom.get("memory")),
    }


def check_oom_caught(run: dict[str, Any], script: Path, folder: Path) -> Checks:
    seen = (run.get("gpu") or {}).get("oom_observer") or {}
    snapshot = folder / str(seen.get("snapshot_file", "-"))
    blocks = seen.get("largest_blocks") or []
    return {
        **_complete(run),
        "the script completed": run.get("exit", {}).get("status") in ("completed", "stopped"),
        "the caught OOM was observed": seen.get("observed_ooms", 0) >= 1,
        "snapshot written at the OOM": snapshot.is_file() and snapshot.stat().st_size > 0,
        "largest block located at the script's line": _first_block(blocks)
        == line_of(script, "torch.empty(2**30"),
    }


def check_tf32(run: dict[str, Any], script: Path) -> Checks:
    flags = (run.get("config") or {}).get("backend_flags") or {}
    return {
        **_complete(run),
        "tf32_matmul read as on": flags.get("tf32_matmul") is True,
        "the window reached NVML": _nvml(run).get("samples", 0) >= 1,
        "the window reached sync-debug": bool(_sites(run)),
    }


def check_ddp(run: dict[str, Any], script: Path) -> Checks:
    return {
        **_complete(run),
        "the script ran its steps": (run.get("steps") or {}).get("measured_steps", 0) >= 1,
        "DDP recorded": bool((run.get("config") or {}).get("ddp")),
    }


def verify(kind: str, runs_dir: Path, script: Path) -> tuple[int, dict[str, Any]]:
    """(exit status, verdict) for one case."""
    folder = newest_run(runs_dir)
    if folder is None:
        return 2, {"kind": kind, "error": f"no run folder under {runs_dir}"}
    run = read_record(folder)
    if kind in ("oom", "oom-caught"):
        fn = check_oom if kind == "oom" else check_oom_caught
        checks = fn(run, script, folder)
    else:
        checks = {"syncs": check_syncs, "tf32": check_tf32, "ddp": check_ddp}[kind](run, script)
    verdict = {"kind": kind, "run_folder": str(folder), "pass": all(checks.values()), **checks}
    return (0 if verdict["pass"] else 1), verdict


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("syncs", "oom", "oom-caught", "tf32", "ddp"):
        print(__doc__.strip().splitlines()[4], file=sys.stderr)
        return 2
    code, verdict = verify(argv[0], Path(argv[1]), Path(argv[2]))
    print(json.dumps(verdict, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
