"""The GPU check's dry run (``GPU_CHECK_DRY=1``, no GPU): every section's verdict logic on faked
inputs shaped like what the GPU run writes, so the script and its judges cannot rot unseen.

    python scripts/gpu_check_dry.py WORK SECTION

Check-based sections (syncs, oom, oom-caught, tf32, ddp-check) get a run folder whose
``run.json`` is built here and whose findings come from torchdoctor's own run rules; the others
get evidence documents. ``good(section)`` returns the evidence a correct GPU path would leave
(tests mutate it into the failures each judge must catch). No torch import: this runs anywhere.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check_judge as judge
import gpu_check_verify as verify

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "scripts" / "gpu_check_cases"
GIB = 2**30
H200 = "NVIDIA H200"
H200_TOTAL = 150_109_429_760  # what torch reports for the H200's 143771 MiB
BF16_PEAK = 989.4e12  # hardware.py's dense bf16 rate for "H200 SXM"

CASE_SCRIPTS = {
    "syncs": CASES / "scaler_syncs.py",
    "oom": CASES / "oom.py",
    "oom-caught": CASES / "oom.py",
    "tf32": CASES / "tf32_new_api.py",
    "ddp-check": ROOT / "examples" / "check" / "ddp_train.py",
}


def _tune_row(seq: int, phase: str, precision: str, ratio: float, status: str = "ok") -> Any:
    row: dict[str, Any] = {
        "seq": seq,
        "phase": phase,
        "config": "baseline" if precision == "fp32" else f"precision={precision}",
        "assignment": {"precision": precision, "compile": "off", "optimizer_impl": "default"},
        "status": status,
        "reason": "",
        "speedup": ratio,
    }
    if precision != "fp32":
        row["speedup_interval"] = {"ratio": ratio, "low": ratio * 0.97, "high": ratio * 1.03}
    return row


GOOD: dict[str, dict[str, Any]] = {
    "env": {
        "cuda": True,
        "device_name": H200,
        "capability": "9.0",
        "torch": "2.11.0+cu130",
        "torchdoctor_file": str(ROOT / "src" / "torchdoctor" / "__init__.py"),
        "root": str(ROOT),
        "deps": {"msgspec": "0.19.0", "tomli_w": "1.2.0", "isal": "1.7.2", "libcst": "1.9.0"},
        "pip_rc": 0,
    },
    "analyze": {
        "planted": 5,
        "gpu": H200,
        "cases": {
            "fp32_matmul": {
                "expected": "fp32-gemm-no-tensor-cores",
                "unexpected": None,
                "exit": 0,
                "ids": ["fp32-gemm-no-tensor-cores"],
                "kernels": [
                    {
                        "name": "nvjet_sss_128x128_64x4_2x1_v_bz_NNT",
                        "category": "gemm",
                        "tensor_core": False,
                        "dtype": "fp32",
                    }
                ],
            },
            "bf16_matmul": {
                "expected": None,
                "unexpected": "fp32-gemm-no-tensor-cores",
                "exit": 0,
                "ids": [],
                "kernels": [
                    {
                        "name": "nvjet_tst_256x128",
                        "category": "gemm",
                        "tensor_core": True,
                        "dtype": "bf16",
                    }
                ],
            },
            "tiny_ops": {
                "expected": "host-bound",
                "unexpected": None,
                "exit": 0,
                "ids": ["host-bound"],
            },
            "item_sync": {
                "expected": "sync-stalls",
                "unexpected": None,
                "exit": 0,
                "ids": ["sync-stalls"],
            },
            "pageable_copy": {
                "expected": "pageable-h2d-copies",
                "unexpected": None,
                "exit": 0,
                "ids": ["pageable-h2d-copies", "synchronous-copies"],
            },
        },
    },
    "precision": {
        "device_name": H200,
        "capability": [9, 0],
        "chosen": "bf16-mixed",
        "grad_scaler": False,
        "table_entry": "H200 SXM",
        "peak_flops": BF16_PEAK,
    },
    "meter": {
        "device_name": H200,
        "table_entry": "H200 SXM",
        "peak_dtype": "bf16",
        "peak_flops": BF16_PEAK,
        "table_peak_flops": BF16_PEAK,
        "flops_per_step": 7.71e12,
        "analytic_flops_per_step": 7.58e12,
        "mfu": 0.31,
        "timing": "cuda events",
        "events_step_ms": 9.8,
        "host_step_ms": 10.1,
    },
    "prefetch": {
        "equal_to_synchronous_copies": True,
        "trace": {
            "copy_streams": [24],
            "compute_streams": [7],
            "copy_us": 12_000.0,
            "compute_us": 13_000.0,
            "copy_overlapped_with_kernels_us": 10_500.0,
        },
        "copy_ms_alone": 2.1,
        "compute_ms_alone": 2.3,
        "step_ms_prefetch_0": 4.4,
        "step_ms_prefetch_2": 2.5,
        "samples_per_step": [4096] * 30,
        "batch_samples": 4096,
    },
    "fp16": {
        "precision": "fp16-mixed",
        "grad_scaler": True,
        "skipped_steps": 1,
        "scale_before_after": [65536.0, 32768.0],
    },
    "memory-history": {
        "caught_ooms": 5,
        "observed_ooms": 5,
        "observed_after_stop": 5,
        "dumps": 3,
        "max_dumps": 3,
        "ooms": [{"device": 0, "tried_bytes": 2 * H200_TOTAL, "device_limit_bytes": H200_TOTAL}],
        "total_memory_bytes": H200_TOTAL,
        "headline_after_oom": False,
        "headline_after_report": "OOM asking 280 GiB with 0.3 GiB free",
        "snapshot_bytes": 48_213,
    },
    "tune-loop": {
        "sync_debug_mode": 2,
        "backends": {
            "runtime": {"backend": "runtime", "steps": 3, "error": None},
        },
    },
    "ddp": {
        "backend": "nccl",
        "world_size": 1,
        "strategy": "ddp",
        "wrapper": "DistributedDataParallel",
        "losses": [0.52, 0.31],
        "checkpoint_equal": True,
    },
    "fsdp": {
        "backend": "nccl",
        "world_size": 1,
        "strategy": "fsdp",
        "params": 8,
        "dtensor_params": 8,
        "losses": [0.52, 0.30],
        "checkpoint_equal": True,
    },
    "compile": {
        "eager_step_ms": 3.1,
        "modes": {
            "default": {
                "compile_steps": 1,
                "steps": 13,
                "step_time_ms": 2.6,
                "max_rel_loss_diff_vs_eager": 2e-6,
            },
            "reduce-overhead": {
                "compile_steps": 2,
                "steps": 12,
                "step_time_ms": 2.2,
                "max_rel_loss_diff_vs_eager": 3e-6,
            },
        },
    },
    "kernels": {
        "traces": {
            "analyze/bf16_matmul.json.gz": {
                "gpu_ms": 15.5,
                "kernels": [
                    {
                        "name": "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN",
                        "category": "gemm",
                        "family": "cublas-nvjet",
                        "tensor_core": True,
                        "dtype": "bf16",
                        "dtype_in_name": True,
                        "share": 0.267,
                        "classified": True,
                    }
                ],
            },
            "analyze/fp32_matmul.json.gz": {
                "gpu_ms": 228.4,
                "kernels": [
                    {
                        "name": "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3"
                        "_warpsize4x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
                        "category": "gemm",
                        "family": "xmma",
                        "tensor_core": False,
                        "dtype": "fp32",
                        "dtype_in_name": True,
                        "share": 0.375,
                        "classified": True,
                    }
                ],
            },
            "runs-syncs/scaler_syncs-20261201-000000/trace.json.gz": {
                "gpu_ms": 207.3,
                "kernels": [
                    {
                        "name": "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7"
                        "_64x128x64_4x1x1_cga1x1x1_kernel0_0",
                        "category": "attention",
                        "family": "cudnn-sdpa",
                        "tensor_core": True,
                        "dtype": "unknown",
                        "dtype_in_name": False,
                        "share": 0.047,
                        "classified": True,
                    }
                ],
            },
        }
    },
    "tune": {
        "rc": 0,
        "max_trials": 4,
        "json": {
            "best": _tune_row(3, "single", "bf16-mixed", 4.1),
            "baseline": {**_tune_row(1, "baseline", "fp32", 1.0), "data_wait_share": 0.01},
            "claim": {"ratio": 4.1, "low": 3.98, "high": 4.22, "confidence": 0.95},
            "min_gain": 0.02,
            "confirmed": True,
            "confirmation": _tune_row(4, "final", "bf16-mixed", 4.0),
            "stopped_by": "max-trials",
            "trials": 4,
            "ranked": [
                _tune_row(3, "single", "bf16-mixed", 4.1),
                _tune_row(2, "single", "tf32", 3.2),
                _tune_row(1, "baseline", "fp32", 1.0),
            ],
        },
    },
}


def good(section: str) -> dict[str, Any]:
    """A deep copy of the evidence a correct GPU path leaves for ``section``."""
    return copy.deepcopy(GOOD[section])


# The H200 run of nanoGPT (../shared/traces/h200/MANIFEST.md): plain steps, what check's
# instruments made of them, the trace's GPU busy time and its host-bound claim.
H200_PROBE = {  # plain ms, instrumented ms, GPU busy ms, host lead ms, trace's host-bound ms
    "gpt2": (23.1, 47.0, 22.0, 9.0, 31.2),
    "char": (17.0, 44.3, 6.7, -0.05, 33.2),
}


def probe_evidence() -> dict[str, Any]:
    """The probe section's evidence from torchdoctor's own probe-effect rules, run on records
    shaped like the H200 runs: clean steps at the plain time, the profiled ones at what the
    instruments made of them, the trace's host-bound claim."""
    from torchdoctor.rules import probe_effect
    from torchdoctor.rules.finding import Finding

    out: dict[str, Any] = {}
    for shape, (plain, instrumented, busy, lead, host_ms) in H200_PROBE.items():
        clean = [plain * (1 + 0.01 * ((i % 3) - 1)) for i in range(8)]
        profiled = [instrumented * (1 + 0.02 * ((i % 2) - 0.5)) for i in range(5)]
        steps = [60.0, 30.0, 30.0, 30.0, 30.0, *clean, 300.0, *profiled]
        record = {
            "gpu": {"device": {"name": H200}},
            "lines": {"samples": 100},
            "steps": {
                "step_ms": steps,
                "data_wait_ms": [0.0] * len(steps),
                "window": [15, 19],
                "own_steps": [14],
                "clean": {
                    "first_step": 6,
                    "clock": "cuda-events",
                    "step_ms": clean,
                    "host_lead_ms": [lead] * 8,
                },
                # the kernel window: CUDA activity only, the step close to the plain one
                "kernels": {
                    "first_step": 20,
                    "clock": "cuda-events",
                    "step_ms": [plain * 1.02, plain * 1.03, plain * 1.01],
                    "gpu": {"gpu_busy_ms_per_step": busy},
                },
            },
        }
        host = Finding(
            id="host-bound",
            title="Host bound",
            severity="critical",
            saving_ms_per_step=host_ms,
            share_of_step=host_ms / instrumented,
            evidence={},
            fix="",
        )
        # the profiled trace's busy time reads higher than the kernel window's: the latter wins
        effect = probe_effect.measure(record, gpu_busy_ms=busy * 1.1)
        assert effect is not None
        found, effect = probe_effect.apply([host], effect, record)
        top = next((f.id for f in found if f.severity != "info"), None)
        hb = next((f for f in found if f.id == "host-bound"), None)
        out[shape] = {
            "plain_ms": [plain, plain * 1.01],
            "rc": 0,
            "reported_ms": effect.clean_ms,
            "clock": effect.clock,
            "profiled_ratio": effect.profiled.ratio if effect.profiled else None,
            "gpu_busy_ms": effect.gpu_busy_ms,
            "gpu_busy_source": effect.gpu_busy_source,
            "kernels_ratio": next((w.ratio for w in effect.windows if w.name == "kernels"), None),
            "host_lead_ms": effect.host_lead_ms,
            "gpu_bound": effect.gpu_bound,
            "top": top,
            "host_bound_saving_ms": hb.saving_ms_per_step if hb else None,
            "changed": list(effect.changed),
        }
    return out


GOOD["probe"] = probe_evidence()


# -- check-based sections: run folders ---------------------------------------------------------
def _base_record(script: Path, status: str = "stopped") -> dict[str, Any]:
    return {
        "schema": "torchdoctor.run",
        "script": str(script),
        "exit": {"status": status, "code": 0 if status != "error" else 1},
        "steps": {
            "count": 23,
            "measured_steps": 20,
            "window": [4, 13],
            "mean_step_ms": 22.0,
            "mean_data_wait_ms": 0.0,
            "step_ms": [22.0] * 23,
        },
        "config": {"dataloaders": [], "autocast": [], "grad_scalers": [], "optimizers": []},
        "syncs": {"host_syncs": [], "unpinned_non_blocking": [], "sync_debug": []},
        "gpu": {
            "nvml": {"samples": 12, "error": None},
            "memory": {"total_bytes": H200_TOTAL, "peak_allocated_bytes": 4 * GIB},
            "device": {"name": H200, "capability": "9.0", "bf16_tensor_cores": True},
        },
        "ops": None,
    }


def _with_findings(record: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "src"))
    from torchdoctor.rules.run_rules import run_findings

    record["findings"] = [f.to_dict() for f in run_findings(record)]
    return record


def fake_run(section: str, runs: Path) -> tuple[Path, Any]:
    """Write the run folder a correct GPU run of ``section``'s case leaves; returns it with the
    memory command's (report, rc) for ``oom``."""
    script = CASE_SCRIPTS[section]
    folder = runs / f"{script.stem}-20261201-000000"
    folder.mkdir(parents=True, exist_ok=True)
    line = verify.line_of(script, "torch.empty(2**30") if "oom" in section else ""
    extra = None
    rec = _base_record(script)
    if section == "syncs":
        sites = [verify.line_of(script, t) for t in ("scaler.step(opt)", "loss.item()")]
        rec["syncs"]["sync_debug"] = [{"site": s, "count": 10} for s in sites]
        rec["config"]["autocast"] = [{"device_type": "cuda", "dtype": "float16", "enabled": True}]
        rec["config"]["grad_scalers"] = [{"enabled": True}]
    elif section == "oom":
        rec = _base_record(script, "error")
        rec["oom"] = {
            "device": 0,
            "memory": {"ooms": 1, "total_bytes": H200_TOTAL},
            "snapshot_file": "memory_snapshot.pickle",
            "snapshot_at": "oom observer",
            "largest_blocks": [{"bytes": GIB, "where": line}],
        }
        (folder / "memory_snapshot.pickle").write_bytes(b"\x80\x04}\x94.")
        label = f"{script.name}:{line.rsplit(':', 1)[1]} (hold_activations)"
        report = {"devices": [{"history": {"holders_at_peak": [{"label": label}]}}]}
        extra = (report, 0)
    elif section == "oom-caught":
        rec["gpu"]["oom_observer"] = {
            "observed_ooms": 1,
            "observed": [
                {"device": 0, "tried_bytes": 2 * H200_TOTAL, "device_limit_bytes": H200_TOTAL}
            ],
            "snapshot_file": "memory_snapshot.pickle",
            "snapshot_at": "oom observer",
            "largest_blocks": [{"bytes": GIB, "where": line}],
        }
        (folder / "memory_snapshot.pickle").write_bytes(b"\x80\x04}\x94.")
    elif section == "tf32":
        rec["config"]["backend_flags"] = {"tf32_matmul": True, "cuda_matmul_fp32_precision": "tf32"}
        rec["syncs"]["sync_debug"] = [{"site": verify.line_of(script, "loss.item()"), "count": 10}]
    elif section == "ddp-check":
        rec["config"]["ddp"] = [{"device_ids": [0], "bucket_cap_mb": 25}]
    (folder / "run.json").write_text(json.dumps(_with_findings(rec)))
    return folder, extra


def run(work: Path, section: str) -> dict[str, Any]:
    """Judge ``section`` on its faked inputs; the verdict is stored as the GPU run stores it."""
    if section in verify.SECTIONS:
        runs = work / f"runs-{section}"
        _folder, extra = fake_run(section, runs)
        _code, out = verify.verify(section, runs, CASE_SCRIPTS[section], extra)
        out["evidence"]["dry"] = True
        return judge.store(work, out)
    evidence = {**good(section), "dry": True}
    return judge.write(work, section, evidence)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: gpu_check_dry.py WORK SECTION...", file=sys.stderr)
        return 2
    work = Path(argv[0])
    ok = True
    for section in argv[1:]:
        out = run(work, section)
        print(f"{section:15s} {'PASS' if out['pass'] else 'FAIL'}  {out['figure']}", flush=True)
        ok = ok and out["pass"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
