"""An inference engine's iterations: prefill vs decode, batch, tokens, and the host around them.

Computed for traces whose steps are the engine's own (``server-step``, ``graph-replay`` or
``forward`` steps, see ``trace/server_steps.py``), and for ``torchdoctor check`` traces whose
steps were top-level model calls (marked ``FORWARD_STEP_MARK``). Per step:

* **kind and sizes** from the annotations: SGLang's ``step[DECODE bs=32]`` /
  ``step[EXTEND bs=15 toks=15360]`` (EXTEND is a prefill), and the
  ``execute_<tokens>_context_<R_C>(sq<ΣN_Q>sk<ΣN_KV>...)_generation_<R_G>(sq..sk..)`` ranges of
  TraceLens-patched engines (R_C prefill and R_G decode requests, their query and KV tokens); a
  step with both prefill and decode requests is ``mixed``;
* **accounted time**: the step's window less the time the GPU ran work the trace does not hold
  (``not_recorded`` in the breakdown); tokens per second divide by it;
* **host time the GPU waited for**: the step's idle time waiting on the host (late launches,
  synchronisation, the step's opening before its first launch);
* **blocking device-to-host copies** in the step (a copy through a synchronous call, or one whose
  operator also synchronised): how many, how long the CPU was held, and the Python frame.

Between consecutive steps, the CPU time from one step's range end to the next one's start is the
engine's own work between iterations (scheduling, sampling, detokenisation).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from torchdoctor.analysis._join import launch_of
from torchdoctor.analysis.bandwidth import Bandwidth, bandwidth_in
from torchdoctor.analysis.breakdown import StepBreakdown
from torchdoctor.analysis.gpu_activity import SYNC_CALLS, GpuActivity
from torchdoctor.trace.arrays import member
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.server_steps import (
    EXECUTE_STEP,
    SGLANG_STEP,
    Engine,
    detect_engine,
    graph_launch_rows,
    is_serving,
)
from torchdoctor.trace.steps import Steps
from torchdoctor.trace.table import TraceTable

StepKind = Literal["prefill", "decode", "mixed", "unknown"]
_SGLANG_KIND: dict[str, StepKind] = {
    "DECODE": "decode",
    "EXTEND": "prefill",
    "PREFILL": "prefill",
    "MIXED": "mixed",
}
_ATTR = re.compile(r"(\w+)=(\d+)")
_COUNTS = re.compile(r"sq(\d+)sk(\d+)")
_HOST_PARTS = ("host_overhead", "synchronization", "input_pipeline")
_OWN_FRAMES = ("torch/", "<built-in", "<frozen", "threading.py", "contextlib.py")


@dataclass(frozen=True)
class ServingStep:
    """One engine iteration (times in ms; sizes None where the trace does not say)."""

    number: int
    label: str
    kind: StepKind
    batch_size: int | None
    """Requests in the batch."""
    tokens: int | None
    """Query tokens processed in the step (prefill tokens plus one per decode request)."""
    prefill_requests: int | None
    decode_requests: int | None
    decode_kv_tokens: int | None
    """Sum of the decode requests' context lengths (the KV cache they read)."""
    step_ms: float
    accounted_ms: float
    gpu_busy_ms: float
    host_wait_ms: float
    """GPU idle time in the step waiting on the host (late launches, syncs, the opening)."""
    graph_launches: int
    blocking_d2h: int
    cpu_blocked_ms: float
    """CPU time inside those blocking copies (and the synchronising calls with them)."""

    @property
    def generated_tokens(self) -> int | None:
        """Tokens the step produces: one per decode request (prefill requests aside)."""
        if self.kind == "prefill":
            return None  # the requests whose prompt completes make one each: not in the trace
        if self.decode_requests is not None:
            return self.decode_requests
        return self.batch_size if self.kind == "decode" else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "generated_tokens": self.generated_tokens}


@dataclass(frozen=True)
class KindStats:
    """Steps of one kind, means over them."""

    kind: StepKind
    steps: int
    mean_step_ms: float
    """Accounted time per step."""
    mean_batch_size: float | None
    mean_tokens: float | None
    tokens_per_s: float | None
    """Query tokens processed per second of accounted step time."""
    generated_tokens_per_s: float | None
    gpu_busy_share: float
    host_wait_ms: float
    """Mean GPU idle per step waiting on the host."""


@dataclass(frozen=True)
class ServingStats:
    """The engine's iterations in the analysed window."""

    engine: Engine
    steps: tuple[ServingStep, ...]
    by_kind: dict[str, KindStats]
    between_steps_ms: tuple[float, ...]
    """CPU time from each step's own range end to the next step's start."""
    d2h_frames: tuple[str, ...]
    """The Python frames (outside torch) around the blocking device-to-host copies."""
    bandwidth: dict[str, Bandwidth] = field(default_factory=dict)
    """GEMM/attention traffic per step kind, where the shapes were recorded."""
    d2h_copies_us: tuple[tuple[float, float], ...] = ()
    """(call start, return) of each blocking device-to-host copy, microseconds."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "steps": [s.to_dict() for s in self.steps],
            "by_kind": {k: asdict(v) for k, v in self.by_kind.items()},
            "between_steps_ms": list(self.between_steps_ms),
            "d2h_frames": list(self.d2h_frames),
            "bandwidth": {k: v.to_dict() for k, v in self.bandwidth.items()},
        }


def analyze_serving(
    table: TraceTable, steps: Steps, act: GpuActivity, per_step: list[StepBreakdown]
) -> ServingStats | None:
    """The serving view of a trace whose steps are an engine's iterations, else None."""
    if not is_serving(table, steps.source):
        return None
    copies = blocking_d2h(table, act)
    graphs = table.ts[graph_launch_rows(table)]
    execs = _execute_ranges(table)
    out = []
    for i, part in enumerate(per_step):
        lo, hi = float(steps.starts_us[i]), float(steps.ends_us[i])
        label = steps.labels[i] if i < len(steps.labels) else ""
        sizes = _sizes(label, _execute_at(table, execs, lo, hi))
        mine = [c for c in copies if lo <= c[0] < hi]
        not_rec = part.idle_ms.get("not_recorded", 0.0)
        out.append(
            ServingStep(
                number=int(steps.numbers[i]),
                label=label,
                **sizes,
                step_ms=part.step_ms,
                accounted_ms=part.step_ms - not_rec,
                gpu_busy_ms=part.gpu_busy_ms,
                host_wait_ms=sum(part.idle_ms.get(k, 0.0) for k in _HOST_PARTS),
                graph_launches=int(((graphs >= lo) & (graphs < hi)).sum()),
                blocking_d2h=len(mine),
                cpu_blocked_ms=sum(c[1] for c in mine) / 1e3,
            )
        )
    return ServingStats(
        engine=detect_engine(table),
        steps=tuple(out),
        by_kind=_by_kind(out),
        between_steps_ms=_between(steps),
        d2h_frames=tuple(dict.fromkeys(c[2] for c in copies if c[2]))[:4],
        bandwidth=_bandwidth(table, steps, out),
        d2h_copies_us=tuple((c[0], c[3]) for c in copies),
    )


def _bandwidth(table: TraceTable, steps: Steps, out: list[ServingStep]) -> dict[str, Bandwidth]:
    dev = table.meta.devices[0] if table.meta.devices else {}
    name = str(dev.get("name") or "") or None
    mem = dev.get("totalGlobalMem") if isinstance(dev.get("totalGlobalMem"), int) else None
    res = {}
    for kind in ("decode", "prefill", "mixed"):
        windows = [
            (float(steps.starts_us[i]), float(steps.ends_us[i]))
            for i, s in enumerate(out)
            if s.kind == kind
        ]
        bw = bandwidth_in(table, windows, name, mem)
        if bw is not None:
            res[kind] = bw
    return res


def _sizes(label: str, execute: str) -> dict[str, Any]:
    """Kind and sizes from a ``step[...]`` label and/or an ``execute_...`` range."""
    kind: StepKind = "unknown"
    batch = tokens = pre = dec = kv = None
    m = re.match(EXECUTE_STEP, execute or label)
    if m:
        tokens, pre, dec = int(m.group(1)), int(m.group(2)), int(m.group(4))
        d = _COUNTS.match(m.group(5))
        kv = int(d.group(2)) if d else None
        batch = pre + dec
        kind = "mixed" if pre and dec else "prefill" if pre else "decode" if dec else "unknown"
    s = re.match(SGLANG_STEP, label)
    if s:
        kind = _SGLANG_KIND.get(s.group(1).upper(), kind)
        attrs = {k: int(v) for k, v in _ATTR.findall(s.group(2))}
        batch = attrs.get("bs", batch)
        tokens = attrs.get("toks", tokens if tokens is not None else None)
        if tokens is None and kind == "decode" and batch is not None:
            tokens = batch
    return {
        "kind": kind,
        "batch_size": batch,
        "tokens": tokens,
        "prefill_requests": pre,
        "decode_requests": dec,
        "decode_kv_tokens": kv,
    }


def _execute_ranges(table: TraceTable) -> np.ndarray:
    return table.rows_named(lambda n: bool(re.match(EXECUTE_STEP, n)), Kind.USER_ANNOTATION)


def _execute_at(table: TraceTable, rows: np.ndarray, lo: float, hi: float) -> str:
    """The ``execute_...`` range that holds the step's start or starts inside the step."""
    for r in rows.tolist():
        s, e = float(table.ts[r]), float(table.ts[r] + table.dur[r])
        if s <= lo < e or lo <= s < hi:
            return table.names[int(table.name[r])]
    return ""


def blocking_d2h(table: TraceTable, act: GpuActivity) -> list[tuple[float, float, str, float]]:
    """(call start µs, CPU-held µs, Python frame, return µs) of each blocking device-to-host
    copy: the copy's launch call is a synchronising one, or a synchronising call follows it
    inside the same operator (``.item()``, ``.tolist()``, ``.cpu()``); it returns when the last
    of those calls does."""
    d2h = act.rows[act.memcpy_dir == "DtoH"]
    if not len(d2h):
        return []
    runtime = table.of_kind(Kind.RUNTIME, Kind.DRIVER)
    syncs = runtime[member(table.name[runtime], table.codes_matching(lambda n: n in SYNC_CALLS))]
    ops = table.of_kind(Kind.CPU_OP)
    out = []
    for c in launch_of(table, d2h).tolist():
        if c < 0:
            continue
        t0, held = float(table.ts[c]), float(table.dur[c])
        back = t0 + held
        if table.names[int(table.name[c])] not in SYNC_CALLS:
            around = ops[(table.ts[ops] <= t0) & (table.ts[ops] + table.dur[ops] >= t0)]
            if not len(around):
                continue
            op = int(around[np.argmax(table.ts[around])])
            op_end = float(table.ts[op] + table.dur[op])
            after = syncs[(table.ts[syncs] > t0) & (table.ts[syncs] < op_end)]
            if not len(after):
                continue
            held += float(table.dur[after].sum())
            back = max(back, float((table.ts[after] + table.dur[after]).max()))
        out.append((t0, held, _user_frame(table, t0), back))
    return out


def _user_frame(table: TraceTable, t: float) -> str:
    """The innermost Python frame at ``t`` that is not torch's or a built-in."""
    rows = table.of_kind(Kind.PYTHON_FUNCTION)
    rows = rows[(table.ts[rows] <= t) & (table.ts[rows] + table.dur[rows] >= t)]
    for r in rows[np.argsort(-table.ts[rows], kind="stable")].tolist():
        name = table.names[int(table.name[r])]
        if not any(mark in name for mark in _OWN_FRAMES):
            return name
    return ""


def _between(steps: Steps) -> tuple[float, ...]:
    if steps.cpu_ends_us is None or len(steps) < 2:
        return ()
    gaps = steps.starts_us[1:] - steps.cpu_ends_us[:-1]
    return tuple(round(float(g) / 1e3, 4) for g in np.clip(gaps, 0.0, None))


def _by_kind(steps: list[ServingStep]) -> dict[str, KindStats]:
    out: dict[str, KindStats] = {}
    for kind in ("prefill", "decode", "mixed", "unknown"):
        mine = [s for s in steps if s.kind == kind]
        if not mine:
            continue
        acc = sum(s.accounted_ms for s in mine)
        out[kind] = KindStats(
            kind=kind,
            steps=len(mine),
            mean_step_ms=acc / len(mine),
            mean_batch_size=_mean([s.batch_size for s in mine]),
            mean_tokens=_mean([s.tokens for s in mine]),
            tokens_per_s=_rate([s.tokens for s in mine], acc),
            generated_tokens_per_s=_rate([s.generated_tokens for s in mine], acc),
            gpu_busy_share=sum(s.gpu_busy_ms for s in mine) / acc if acc > 0 else 0.0,
            host_wait_ms=sum(s.host_wait_ms for s in mine) / len(mine),
        )
    return out


def _mean(values: list[int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known and len(known) == len(values) else None


def _rate(values: list[int | None], ms: float) -> float | None:
    if ms <= 0 or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None) / (ms / 1e3)
