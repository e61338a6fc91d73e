"""Verdicts of the GPU check: each section's evidence (plain data) in, a verdict out.

Pure Python, no torch: the same functions judge what a GPU run collected and, in the CPU dry run
(``GPU_CHECK_DRY=1``), recorded or faked evidence, so the logic that decides is the logic that
was tested. A section passes on numbers, never on "it ran": every check below names the figure
it compares and the bound it compares it with.

A verdict is ``{"section", "pass", "figure", "checks": {name: bool}, "evidence": {...}}``;
``write(work, section, evidence)`` judges and stores it as ``WORK/verdicts/<section>.json``.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Evidence = dict[str, Any]
Checks = dict[str, bool]

FLOPS_BAND = (0.9, 1.2)
"""Measured (FlopCounterMode) over analytic FLOPs per step: the analytic count leaves out layer
norms, GELU and softmax (a few %), FlopCounterMode counts causal attention as full (+ a few %)."""
EVENTS_OVER_HOST = (0.8, 1.25)
"""The meter's CUDA-event step time over synchronised host-clock timing of the same steps."""
MIN_OVERLAP = 0.5
"""Copy time hidden under kernels of another stream, over min(copy, compute): half at least."""
SPEEDUP_SHARE = 0.5
"""The prefetch speed-up must reach half the ideal one: the serial step over the longer of the
copy and the compute, each measured alone (the prefetched step cannot beat either)."""
MIN_TRACES = 3
"""The kernels section reads the analyze section's five planted traces and the check runs' own."""
MAX_DATA_WAIT = 0.2
"""The tune case must be GPU-bound: a baseline waiting on its loader longer than this share of the
step (0.80 on an H200 with the loader-fed case) hides any precision gain."""
IDEAL_NOISE = 1.05
"""A measured speed-up may exceed the ideal by timing noise only: 5%."""
PROBE_STEP_BAND = 1.15
"""check's reported step over the script's own plain step (GPT-2 shape): within 15%."""
PROBE_IDLE_NOISE = 1.05
"""host-bound's saving may pass the plain step less the GPU's busy time by 5% (timing noise)."""


def verdict(section: str, checks: Checks, figure: str, evidence: Evidence) -> dict[str, Any]:
    """The verdict document: passes when there is at least one check and every check holds."""
    return {
        "section": section,
        "pass": bool(checks) and all(checks.values()),
        "figure": figure,
        "checks": checks,
        "evidence": evidence,
    }


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(float(x)) else None


def _within(x: Any, band: tuple[float, float]) -> bool:
    v = _num(x)
    return v is not None and band[0] <= v <= band[1]


def _ratio(a: Any, b: Any) -> float | None:
    x, y = _num(a), _num(b)
    return x / y if x is not None and y else None


def _fmt(x: Any, spec: str = ".3g") -> str:
    v = _num(x)
    return "n/a" if v is None else format(v, spec)


# -- env ---------------------------------------------------------------------------------------
def judge_env(e: Evidence) -> dict[str, Any]:
    deps = e.get("deps") or {}
    checks = {
        "a CUDA device answers": bool(e.get("cuda")),
        "torchdoctor imported from this checkout's src/": str(
            e.get("torchdoctor_file", "")
        ).startswith(str(e.get("root", "?")).rstrip("/") + "/src/"),
        "msgspec, tomli_w, isal and libcst import": all(
            deps.get(n) for n in ("msgspec", "tomli_w", "isal", "libcst")
        ),
        "pip installed the carried wheels (or none were needed)": e.get("pip_rc") in (0, None),
    }
    figure = f"{e.get('device_name', 'no GPU')} (sm {e.get('capability', '?')}), torch {e.get('torch', '?')}"
    return verdict("env", checks, figure, e)


# -- analyze -----------------------------------------------------------------------------------
def judge_analyze(e: Evidence) -> dict[str, Any]:
    cases = e.get("cases") or {}
    checks: Checks = {}
    found = 0
    for name, c in cases.items():
        ids = set(c.get("ids") or [])
        ok = c.get("exit") == 0 and "error" not in c  # the analyze command ran to the end
        if c.get("expected"):
            ok = ok and c["expected"] in ids
        if c.get("unexpected"):
            ok = ok and c["unexpected"] not in ids
        checks[f"{name}: {c.get('expected') or 'no ' + str(c.get('unexpected'))}"] = ok
        found += ok
    checks["every planted case profiled"] = len(cases) >= int(e.get("planted", len(cases))) > 0
    return verdict("analyze", checks, f"{found}/{len(cases)} planted cases right", e)


# -- runtime -----------------------------------------------------------------------------------
def judge_precision(e: Evidence) -> dict[str, Any]:
    cap = tuple(e.get("capability") or (0, 0))
    ampere = cap >= (8, 0)
    checks = {
        "auto picks bf16-mixed on sm80+ (fp32 before)": e.get("chosen")
        == ("bf16-mixed" if ampere else "fp32"),
        "no GradScaler with bf16": not (e.get("chosen") == "bf16-mixed" and e.get("grad_scaler")),
        "the GPU is in the peak table": bool(e.get("table_entry")),
    }
    return verdict("precision", checks, f"{e.get('chosen')} ({e.get('table_entry')})", e)


def judge_meter(e: Evidence) -> dict[str, Any]:
    over = _ratio(e.get("flops_per_step"), e.get("analytic_flops_per_step"))
    name = str(e.get("device_name", ""))
    entry = str(e.get("table_entry") or "")
    mfu = _num(e.get("mfu"))
    ev_host = _ratio(e.get("events_step_ms"), e.get("host_step_ms"))
    checks = {
        f"measured FLOPs within {FLOPS_BAND} of analytic": _within(over, FLOPS_BAND),
        "the device's own table entry (H200 for an H200)": bool(entry)
        and ("H200" not in name.upper() or "H200" in entry),
        "the table's dense peak for the dtype is the one used": _num(e.get("peak_flops"))
        is not None
        and e.get("peak_flops") == e.get("table_peak_flops"),
        "0 < MFU < 1": mfu is not None and 0.0 < mfu < 1.0,
        "timed with CUDA events": e.get("timing") == "cuda events",
        f"events over host clock within {EVENTS_OVER_HOST}": _within(ev_host, EVENTS_OVER_HOST),
    }
    figure = (
        f"MFU {_fmt(100 * mfu if mfu is not None else None, '.1f')}% of "
        f"{_fmt((_num(e.get('peak_flops')) or 0) / 1e12, '.0f')} TFLOP/s {e.get('peak_dtype')}; "
        f"FLOPs {_fmt(over, '.3f')}x analytic"
    )
    return verdict("meter", checks, figure, {**e, "measured_over_analytic": over})


def prefetch_overlap(t: Evidence) -> dict[str, Any]:
    """From a trace summary: copies and kernels on separate streams, and the share of the copy
    time hidden under kernels of other streams, over min(copy, compute)."""
    copy_us, compute_us = _num(t.get("copy_us")) or 0.0, _num(t.get("compute_us")) or 0.0
    hidden = _num(t.get("copy_overlapped_with_kernels_us")) or 0.0
    floor = min(copy_us, compute_us)
    copy_streams = set(t.get("copy_streams") or [])
    kernel_streams = set(t.get("compute_streams") or [])
    return {
        "separate_streams": bool(copy_streams) and not copy_streams & kernel_streams,
        "overlap_of_min": hidden / floor if floor > 0 else None,
    }


def judge_prefetch(e: Evidence) -> dict[str, Any]:
    o = prefetch_overlap(e.get("trace") or {})
    copy, compute = _num(e.get("copy_ms_alone")), _num(e.get("compute_ms_alone"))
    ideal = _ratio(e.get("step_ms_prefetch_0"), max(copy, compute)) if copy and compute else None
    speedup = _ratio(e.get("step_ms_prefetch_0"), e.get("step_ms_prefetch_2"))
    need = None if ideal is None else 1 + SPEEDUP_SHARE * (ideal - 1)
    checks = {
        "batches equal synchronous copies": bool(e.get("equal_to_synchronous_copies")),
        "copies on a side stream, kernels on another": o["separate_streams"],
        f"copy hidden under compute >= {MIN_OVERLAP} of min(copy, compute)": (
            o["overlap_of_min"] or 0.0
        )
        >= MIN_OVERLAP,
        "speed-up >= half the ideal (serial step / max(copy, compute) alone)": speedup is not None
        and need is not None
        and speedup >= need,
        f"speed-up <= the ideal x {IDEAL_NOISE} (the ideal is measured, not a guess)": speedup
        is not None
        and ideal is not None
        and speedup <= ideal * IDEAL_NOISE,
        "each step credited with the one batch it took": bool(e.get("samples_per_step"))
        and all(n == e.get("batch_samples") for n in e.get("samples_per_step") or []),
    }
    figure = (
        f"overlap {_fmt(o['overlap_of_min'], '.2f')} of min(copy, compute); speed-up "
        f"{_fmt(speedup, '.2f')}x (ideal {_fmt(ideal, '.2f')}x)"
    )
    return verdict("prefetch", checks, figure, {**e, **o, "speedup": speedup, "ideal": ideal})


def judge_fp16(e: Evidence) -> dict[str, Any]:
    before, after = e.get("scale_before_after") or (None, None)
    checks = {
        "fp16-mixed with a GradScaler": e.get("precision") == "fp16-mixed"
        and bool(e.get("grad_scaler")),
        "the overflowing step skipped, counted once": e.get("skipped_steps") == 1,
        "the scale halved": _num(before) is not None and _num(after) is not None and after < before,
    }
    return verdict(
        "fp16", checks, f"{e.get('skipped_steps')} skipped step(s), scale {before} -> {after}", e
    )


def judge_memory_history(e: Evidence) -> dict[str, Any]:
    caught, cap = int(e.get("caught_ooms") or 0), int(e.get("max_dumps") or 0)
    ooms = e.get("ooms") or []
    checks = {
        "every caught OOM observed": e.get("observed_ooms") == caught > 1,
        "snapshots capped": e.get("dumps") == min(caught, cap) and cap > 0,
        "not analysed inside the allocator": e.get("headline_after_oom") is False,
        "analysed afterwards": bool(e.get("headline_after_report")),
        "third argument is the device limit (total memory)": bool(ooms)
        and ooms[0].get("device_limit_bytes") == e.get("total_memory_bytes"),
        "quiet after stop": e.get("observed_after_stop") == e.get("observed_ooms"),
        "snapshot written": int(e.get("snapshot_bytes") or 0) > 0,
    }
    figure = f"{e.get('observed_ooms')} OOMs seen, {e.get('dumps')} snapshot(s), limit {ooms[0].get('device_limit_bytes') if ooms else None}"
    return verdict("memory-history", checks, figure, e)


def judge_tune_loop(e: Evidence) -> dict[str, Any]:
    backends = e.get("backends") or {}
    checks = {
        f"{name}: {b.get('steps', 0)} accumulated steps without a sync": b.get("error") is None
        and int(b.get("steps") or 0) > 0
        for name, b in backends.items()
    }
    checks["the runtime loop (the only trial path) checked"] = set(backends) == {"runtime"}
    checks["sync-debug mode was 'error'"] = e.get("sync_debug_mode") == 2
    bad = [f"{n}: {b.get('error')}" for n, b in backends.items() if b.get("error")]
    return verdict("tune-loop", checks, "; ".join(bad) or "no sync in the loop step", e)


# -- dist, compile -----------------------------------------------------------------------------
def _dist(section: str, e: Evidence, strategy: str, sharded: Callable[[Evidence], bool]) -> Any:
    losses = e.get("losses") or []
    checks = {
        "NCCL, one rank": e.get("backend") == "nccl" and e.get("world_size") == 1,
        f"strategy {strategy}": e.get("strategy") == strategy,
        "wrapped as that strategy wraps": sharded(e),
        "loss falls": len(losses) >= 2 and _num(losses[-1]) is not None and losses[-1] < losses[0],
        "checkpoint round trip restores every tensor": bool(e.get("checkpoint_equal")),
    }
    figure = f"{e.get('backend')} x{e.get('world_size')}, loss {_fmt(losses[0] if losses else None)} -> {_fmt(losses[-1] if losses else None)}"
    return verdict(section, checks, figure, e)


def judge_ddp(e: Evidence) -> dict[str, Any]:
    return _dist("ddp", e, "ddp", lambda e: e.get("wrapper") == "DistributedDataParallel")


def judge_fsdp(e: Evidence) -> dict[str, Any]:
    return _dist(
        "fsdp",
        e,
        "fsdp",
        lambda e: int(e.get("dtensor_params") or 0) == int(e.get("params") or -1) > 0,
    )


def judge_compile(e: Evidence) -> dict[str, Any]:
    modes = e.get("modes") or {}
    checks: Checks = {}
    for mode in ("default", "reduce-overhead"):
        m = modes.get(mode) or {}
        checks[f"{mode}: losses within 1e-3 of eager"] = (
            _num(m.get("max_rel_loss_diff_vs_eager")) or 1.0
        ) < 1e-3
        checks[f"{mode}: compile steps kept apart, steady steps timed"] = (
            int(m.get("compile_steps") or 0) >= 1 and int(m.get("steps") or 0) >= 5
        )
    speed = {
        k: _ratio(e.get("eager_step_ms"), (modes.get(k) or {}).get("step_time_ms")) for k in modes
    }
    figure = ", ".join(f"{k} {_fmt(v, '.2f')}x eager" for k, v in speed.items()) or "no modes"
    return verdict("compile", checks, figure, {**e, "speedup_vs_eager": speed})


# -- tune --------------------------------------------------------------------------------------
def judge_tune(e: Evidence) -> dict[str, Any]:
    data = e.get("json") or {}
    rows = list(data.get("ranked") or []) + (
        [data["confirmation"]] if data.get("confirmation") else []
    )
    claim = data.get("claim") or {}
    min_gain = _num(data.get("min_gain")) or 0.0
    best = (data.get("best") or {}).get("assignment") or {}
    statuses = [r.get("status") for r in rows]
    wait = _num((data.get("baseline") or {}).get("data_wait_share"))
    checks = {
        "tune exited 0": e.get("rc") == 0,
        f"the case is GPU-bound: the baseline waits on its loader < {MAX_DATA_WAIT:.0%} of the step": (
            wait is not None and wait < MAX_DATA_WAIT
        ),
        "every trial ok (none timed out or crashed)": bool(statuses)
        and all(s == "ok" for s in statuses),
        "no compiled trial (max-autotune cannot start)": all(
            (r.get("assignment") or {}).get("compile", "off") == "off" for r in rows
        ),
        "trials bounded by --max-trials": int(data.get("trials") or 0)
        <= int(e.get("max_trials") or 0),
        "a claim whose whole interval clears 1 + min_gain": (_num(claim.get("low")) or 0.0)
        > 1 + min_gain,
        "the pick is a faster precision than fp32": best.get("precision") not in (None, "fp32"),
        "the confirmation agrees": data.get("confirmed") is True,
    }
    figure = (
        f"{best.get('precision')} {_fmt(claim.get('ratio'), '.2f')}x "
        f"[{_fmt(claim.get('low'), '.2f')}, {_fmt(claim.get('high'), '.2f')}], "
        f"{data.get('trials')} trials ({', '.join(map(str, statuses))}); baseline data wait "
        f"{_fmt(wait, '.0%')}"
    )
    return verdict("tune", checks, figure, e)


# -- kernels -----------------------------------------------------------------------------------
def judge_kernels(e: Evidence) -> dict[str, Any]:
    """Every kernel taking >= 1% of the GPU time in the check's own traces is classified: a known
    family and category, and for GEMM/conv/attention tensor cores yes/no and a dtype (or a family
    whose names carry none, which then claims none)."""
    traces = e.get("traces") or {}
    rows = [(t, k) for t, d in traces.items() for k in d.get("kernels") or []]
    bad = [k for _, k in rows if not k.get("classified")]
    checks = {
        f"kernels of >= {MIN_TRACES} traces read": len(traces) >= MIN_TRACES,
        "every kernel >= 1% of GPU time classified": bool(rows) and not bad,
    }
    figure = f"{len(rows)} kernels >= 1% in {len(traces)} traces" + (
        "; unclassified: "
        + ", ".join(f"{str(k.get('name'))[:60]} ({_fmt(k.get('share'), '.1%')})" for k in bad[:3])
        if bad
        else ", all classified"
    )
    return verdict("kernels", checks, figure, e)


# -- probe effect ------------------------------------------------------------------------------
def judge_probe(e: Evidence) -> dict[str, Any]:
    """check on a GPT-2-shaped eager step reports the script's own (plain) step within 15% and
    does not call it host-bound; on the small char model host-bound's saving is at most the
    plain step less the GPU's busy time."""
    gpt, char = e.get("gpt2") or {}, e.get("char") or {}

    def plain(d: Evidence) -> float | None:
        xs = [v for v in (_num(x) for x in d.get("plain_ms") or []) if v is not None]
        return sorted(xs)[len(xs) // 2] if xs else None

    gpt_plain, char_plain = plain(gpt), plain(char)
    ratio = _ratio(gpt.get("reported_ms"), gpt_plain)
    busy = _num(char.get("gpu_busy_ms"))
    saving = _num(char.get("host_bound_saving_ms")) or 0.0
    idle = (char_plain - busy) if char_plain is not None and busy is not None else None
    checks = {
        "GPT-2 shape: reported step within 1.15x of plain": ratio is not None
        and 1 / PROBE_STEP_BAND <= ratio <= PROBE_STEP_BAND,
        "GPT-2 shape: timed by CUDA events": gpt.get("clock") == "cuda-events",
        "GPT-2 shape: top finding is not host-bound": gpt.get("top") != "host-bound",
        "char model: host-bound saving <= plain step - GPU busy": idle is not None
        and saving <= max(0.0, idle) * PROBE_IDLE_NOISE,
        "GPU busy read from the kernel window (CUDA activity only)": all(
            d.get("gpu_busy_source") == "kernel window" for d in (gpt, char)
        ),
    }
    figure = (
        f"GPT-2 reported {_fmt(gpt.get('reported_ms'))} ms vs plain {_fmt(gpt_plain)} ms "
        f"({_fmt(ratio, '.2f')}x; profiled window {_fmt(gpt.get('profiled_ratio'), '.2f')}x), "
        f"top {gpt.get('top')}; char host-bound {_fmt(saving)} ms <= plain {_fmt(char_plain)} - "
        f"busy {_fmt(busy)} ms; kernel window {_fmt(gpt.get('kernels_ratio'), '.2f')}x"
    )
    return verdict("probe", checks, figure, e)


JUDGES: dict[str, Callable[[Evidence], dict[str, Any]]] = {
    "env": judge_env,
    "analyze": judge_analyze,
    "precision": judge_precision,
    "meter": judge_meter,
    "prefetch": judge_prefetch,
    "fp16": judge_fp16,
    "memory-history": judge_memory_history,
    "tune-loop": judge_tune_loop,
    "ddp": judge_ddp,
    "fsdp": judge_fsdp,
    "compile": judge_compile,
    "tune": judge_tune,
    "kernels": judge_kernels,
    "probe": judge_probe,
}


def error_verdict(section: str, error: str, evidence: Evidence | None = None) -> dict[str, Any]:
    """A section whose collection raised: failed, with the error as its evidence."""
    return verdict(
        section,
        {"collected without an error": False},
        error[:200],
        {**(evidence or {}), "error": error},
    )


def write(
    work: Path, section: str, evidence: Evidence, seconds: float | None = None
) -> dict[str, Any]:
    """Judge ``evidence`` for ``section`` and store the verdict under ``work/verdicts``."""
    out = (
        JUDGES[section](evidence)
        if "error" not in evidence
        else error_verdict(section, str(evidence["error"]), evidence)
    )
    return store(work, out, seconds)


def store(work: Path, out: dict[str, Any], seconds: float | None = None) -> dict[str, Any]:
    """Write a verdict document (any section's) as ``work/verdicts/<section>.json``."""
    if seconds is not None:
        out["seconds"] = round(seconds, 1)
    folder = Path(work) / "verdicts"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{out['section']}.json").write_text(json.dumps(out, indent=2, default=str))
    return out


def main(argv: list[str]) -> int:
    """``gpu_check_judge.py tune WORK RC JSON MAX_TRIALS``: judge a ``torchdoctor tune`` run
    from its exit status and ``--json`` output (the other sections judge in-process)."""
    if len(argv) != 5 or argv[0] != "tune":
        print("usage: gpu_check_judge.py tune WORK RC JSON MAX_TRIALS", file=sys.stderr)
        return 2
    work, rc, path, max_trials = Path(argv[1]), int(argv[2]), Path(argv[3]), int(argv[4])
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        data = {"unreadable": f"{type(exc).__name__}: {exc}"}
    out = write(work, "tune", {"rc": rc, "max_trials": max_trials, "json": data})
    print(f"tune {'PASS' if out['pass'] else 'FAIL'}  {out['figure']}", flush=True)
    return 0 if out["pass"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
