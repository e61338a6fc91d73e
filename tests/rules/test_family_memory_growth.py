"""The memory growth family (``rules/families/memory_growth.py``) on hand-written records, and
the memory columns of the evidence log it can be rebuilt from (capture/evidence.py)."""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any

from torchdoctor.analysis.memory_growth import MIB
from torchdoctor.capture.evidence import EvidenceLog, read_evidence, record_from_evidence
from torchdoctor.rules.families.memory_growth import graph_keeping_lines
from torchdoctor.rules.run_rules import run_findings

SCHEDULE = {"clean": [4, 11], "profiled": [13, 16], "after": [17, 21]}
GIB = 2**30


def _record(rss: list[int], script: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "script": script,
        "exit": {"status": "stopped"},
        "steps": {"mean_step_ms": 50.0, "measured_steps": 4, "schedule": SCHEDULE},
        "memory_steps": {"rss_bytes": rss, "available_bytes": 4 * GIB},
        **extra,
    }


def _grown(per_step: float, n: int = 26) -> list[int]:
    # a little noise that never hides the slope
    return [int(300 * MIB + per_step * i + (i % 3) * 0.3 * per_step) for i in range(n)]


def _growth(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [f.to_dict() for f in run_findings(record) if f.id == "memory-growth"]


def test_a_leak_is_a_warning_with_its_cost(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        '"""retain_graph=True in a docstring is no site."""\n'
        "for step in range(10):\n"
        "    loss = model(x).sum()\n"
        "    loss.backward(retain_graph=True)\n"
        "    total = total + loss\n"
        "    done += loss.item()\n"
    )
    (f,) = _growth(_record(_grown(4 * MIB), str(script)))
    assert f["severity"] == "warning" and f["saving_ms_per_step"] == 0
    assert "resident memory grows 4.0 MiB per step" in f["title"]
    # 4 GiB free at 4 MiB a step: 1024 steps of 50 ms
    assert "runs out in about 1,024 steps, 51 s" in f["title"], f["title"]
    assert f["evidence"]["steps_to_exhaust"] == 1024
    assert f["where"] == [f"{script}:4", f"{script}:5"]
    assert "retain_graph=True" in f["fix"] and "loss.item()" in f["fix"]
    assert ".detach()" in f["fix"]


def test_a_job_that_would_run_out_is_critical() -> None:
    job = {"name": "max_steps", "value": 5000, "unit": "steps"}
    (f,) = _growth(_record(_grown(4 * MIB), job=job))
    assert f["severity"] == "critical"
    assert "GiB more by the job's end (max_steps = 5000)" in f["title"]
    short = {"name": "max_steps", "value": 200, "unit": "steps"}
    (g,) = _growth(_record(_grown(4 * MIB), job=short))
    assert g["severity"] == "warning"


def test_the_heap_in_use_is_fitted_before_resident_memory() -> None:
    # resident memory crept (a fragmenting heap) while what malloc has in use stayed flat
    record = _record(_grown(4 * MIB))
    record["memory_steps"]["heap_bytes"] = [200 * MIB] * 26
    assert _growth(record) == []
    record["memory_steps"]["heap_bytes"] = _grown(2 * MIB)
    (f,) = _growth(record)
    assert f["title"].startswith("host memory in use (malloc's, where CPU tensors live) grows 2.0")


def test_healthy_memory_stays_quiet() -> None:
    flat = [300 * MIB + (i % 2) * 2 * MIB for i in range(26)]  # up and down, no trend
    assert _growth(_record(flat)) == []
    warm = [300 * MIB + min(i, 6) * 16 * MIB for i in range(26)]  # pools grown, then flat
    assert _growth(_record(warm)) == []
    slow = _grown(64 * 2**10)  # 64 KiB a step: the drift of a healthy process
    assert _growth(_record(slow)) == []
    assert _growth({"steps": {"schedule": SCHEDULE}}) == []  # an older record: no column


def test_device_growth_names_the_allocation_sites() -> None:
    memory = {
        "rss_bytes": [300 * MIB] * 26,
        "cuda_allocated_bytes": _grown(8 * MIB),
        "device_total_bytes": 80 * GIB,
        "snapshot": {"top_holders": [{"where": "train.py:30 forward", "bytes": 96 * MIB}]},
    }
    record = {**_record([]), "memory_steps": memory}
    (f,) = _growth(record)
    assert f["title"].startswith("device memory grows 8.0 MiB per step")
    assert "train.py:30 forward" in f["where"] and "train.py:30 forward 96 MiB" in f["fix"]


def test_graph_keeping_lines_reads_code_not_strings(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text(
        "s = 'retain_graph=True'\nrunning_loss += loss\nx.backward(retain_graph=False)\n"
    )
    assert [s for s, _ in graph_keeping_lines(str(script))] == [f"{script}:2"]
    assert graph_keeping_lines(str(tmp_path / "missing.py")) == []


def test_the_evidence_log_carries_memory_per_step(tmp_path: Path) -> None:
    path = tmp_path / "steps.log"
    log = EvidenceLog(path)
    ballast: list[object] = []
    for _ in range(3):
        ballast.append(bytearray(b"\x01") * (8 * MIB))  # malloc's bytes in use grow
        # fresh pages, written: resident memory grows (malloc may serve the bytearray from
        # pages an earlier test freed, which are resident already)
        pages = mmap.mmap(-1, 8 * MIB)
        pages.write(b"\x01" * (8 * MIB))
        ballast.append(pages)
        log.step(0.01, 0.0)
    log.close()
    with path.open("a") as fh:  # an older writer's line, then a line cut at the process's end
        fh.write("s 0.01 0.0\ns 0.01 0.0 12")
    ev = read_evidence(path)
    assert len(ev["step_s"]) == 5 and ev["cuda_bytes"][:3] == [-1, -1, -1]
    rss, heap = ev["rss_bytes"], ev["heap_bytes"]
    assert rss[2] - rss[0] >= 15 * MIB and rss[3] == -1 and rss[4] == -1
    # malloc's bytes in use grow by what was kept (glibc; -1 elsewhere)
    assert heap[3:] == [-1, -1] and (heap[0] == -1 or heap[2] - heap[0] >= 15 * MIB)
    rebuilt = record_from_evidence(ev, {"status": "killed"})
    assert rebuilt["memory_steps"]["rss_bytes"] == rss
    assert rebuilt["memory_steps"]["cuda_allocated_bytes"] is None
    assert rebuilt["memory_steps"]["heap_bytes"] in (heap, None)
    assert len(ballast) == 6
