"""Verdicts on ``torchdoctor check`` runs of the GPU check's cases: read the run folder (its newest
run) and say, per expectation, whether the GPU path did what it must. Pure Python: no torch.

    python scripts/gpu_check_verify.py SECTION RUNS_DIR CASE_SCRIPT WORK [MEMORY_JSON MEMORY_RC]

SECTION: syncs | oom | oom-caught | tf32 | ddp-check. The verdict goes to
``WORK/verdicts/SECTION.json`` (see ``gpu_check_judge``) and to standard output. For ``oom``,
MEMORY_JSON / MEMORY_RC are what ``torchdoctor memory SNAPSHOT --json`` printed and its exit
status. Exit 0 when every expectation holds, 1 when one fails, 2 without a run folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check_judge as judge

Checks = dict[str, bool]
SECTIONS = ("syncs", "oom", "oom-caught", "tf32", "ddp-check")


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


def check_syncs(run: dict[str, Any], script: Path, folder: Path, extra: Any) -> tuple[Checks, str]:
    sites = _sites(run)
    host = [f for f in run.get("findings") or [] if f.get("id") == "host-syncs-in-step"]
    checks = {
        **_complete(run),
        "NVML sampled >= 2 times without error": _nvml(run).get("samples", 0) >= 2
        and not _nvml(run).get("error"),
        "sync-debug sites found": bool(sites),
        "every site is in the script (not torch, not torchdoctor)": bool(sites)
        and all(s.rsplit(":", 1)[0] == str(script.resolve()) for s in sites),
        "GradScaler's sync blamed on scaler.step": line_of(script, "scaler.step(opt)") in sites,
        "the user's .item() found": line_of(script, "loss.item()") in sites,
        "host-syncs-in-step counts them (not 0.0 per step)": bool(host)
        and float(host[0].get("evidence", {}).get("syncs_per_step") or 0) >= 1.0,
    }
    return checks, f"{len(sites)} sync sites, NVML {_nvml(run).get('samples', 0)} samples"


def _memory_names_the_line(memory: dict[str, Any], script: Path, line: str) -> bool:
    want = f"{script.name}:{line.rsplit(':', 1)[1]}"
    for device in memory.get("devices") or []:
        holders = ((device.get("history") or {}).get("holders_at_peak")) or []
        if any(str(h.get("label", "")).startswith(want) for h in holders):
            return True
    return False


def check_oom(run: dict[str, Any], script: Path, folder: Path, extra: Any) -> tuple[Checks, str]:
    oom = run.get("oom") or {}
    blocks = oom.get("largest_blocks") or []
    snapshot = folder / str(oom.get("snapshot_file", "-"))
    line = line_of(script, "torch.empty(2**30")
    memory, memory_rc = extra if extra else ({}, None)
    checks = {
        **_complete(run),
        "the script's OOM is recorded": bool(oom) and run.get("exit", {}).get("status") == "error",
        "snapshot written": snapshot.is_file() and snapshot.stat().st_size > 0,
        "taken by the OOM observer": oom.get("snapshot_at") == "oom observer",
        "largest block located at the script's line": _first_block(blocks) == line,
        "memory read on the OOM's device": oom.get("device") == 0 and bool(oom.get("memory")),
        "torchdoctor memory reads the snapshot": memory_rc == 0,
        "torchdoctor memory names the script's line": _memory_names_the_line(memory, script, line),
    }
    return checks, f"largest block {_first_block(blocks) or 'unlocated'}"


def check_oom_caught(
    run: dict[str, Any], script: Path, folder: Path, extra: Any
) -> tuple[Checks, str]:
    seen = (run.get("gpu") or {}).get("oom_observer") or {}
    snapshot = folder / str(seen.get("snapshot_file", "-"))
    blocks = seen.get("largest_blocks") or []
    observed = seen.get("observed") or []
    total = ((run.get("gpu") or {}).get("memory") or {}).get("total_bytes")
    checks = {
        **_complete(run),
        "the script completed": run.get("exit", {}).get("status") in ("completed", "stopped"),
        "the caught OOM was observed": seen.get("observed_ooms", 0) >= 1,
        "snapshot written at the OOM": snapshot.is_file() and snapshot.stat().st_size > 0,
        "largest block located at the script's line": _first_block(blocks)
        == line_of(script, "torch.empty(2**30"),
        "the observer's third argument is the device limit": bool(observed)
        and observed[0].get("device_limit_bytes") == total,
    }
    return checks, f"{seen.get('observed_ooms', 0)} OOM(s) observed"


def check_tf32(run: dict[str, Any], script: Path, folder: Path, extra: Any) -> tuple[Checks, str]:
    flags = (run.get("config") or {}).get("backend_flags") or {}
    checks = {
        **_complete(run),
        "tf32_matmul read as on": flags.get("tf32_matmul") is True,
        "the window reached NVML": _nvml(run).get("samples", 0) >= 1,
        "the window reached sync-debug": bool(_sites(run)),
    }
    return checks, f"tf32_matmul={flags.get('tf32_matmul')}"


def check_ddp(run: dict[str, Any], script: Path, folder: Path, extra: Any) -> tuple[Checks, str]:
    steps = (run.get("steps") or {}).get("measured_steps", 0)
    checks = {
        **_complete(run),
        "the script ran its steps": steps >= 1,
        "DDP recorded": bool((run.get("config") or {}).get("ddp")),
        "NVML sampled the rank's GPU": _nvml(run).get("samples", 0) >= 1,
    }
    return checks, f"{steps} measured steps"


CHECKS = {
    "syncs": check_syncs,
    "oom": check_oom,
    "oom-caught": check_oom_caught,
    "tf32": check_tf32,
    "ddp-check": check_ddp,
}


def verify(
    section: str, runs_dir: Path, script: Path, extra: Any = None
) -> tuple[int, dict[str, Any]]:
    """(exit status, verdict) for one case; ``extra`` is the memory command's (report, rc)."""
    folder = newest_run(runs_dir)
    if folder is None:
        return 2, judge.error_verdict(section, f"no run folder under {runs_dir}")
    run = read_record(folder)
    checks, figure = CHECKS[section](run, script, folder, extra)
    evidence = {
        "run_folder": str(folder),
        "exit": run.get("exit"),
        "findings": [f.get("id") for f in run.get("findings") or []],
        "gpu": run.get("gpu"),
        "syncs": (run.get("syncs") or {}).get("sync_debug"),
        "oom": {k: v for k, v in (run.get("oom") or {}).items() if k != "memory"},
    }
    out = judge.verdict(section, checks, figure, evidence)
    return (0 if out["pass"] else 1), out


def _memory(argv: list[str]) -> Any:
    if len(argv) < 6:
        return None
    path, rc = Path(argv[4]), int(argv[5]) if argv[5].lstrip("-").isdigit() else None
    try:
        report = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        report = {}
    return report, rc


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] not in SECTIONS:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    code, out = verify(argv[0], Path(argv[1]), Path(argv[2]), _memory(argv))
    judge.store(Path(argv[3]), out)
    print(json.dumps({k: v for k, v in out.items() if k != "evidence"}, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
