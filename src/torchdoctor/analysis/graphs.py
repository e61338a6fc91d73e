"""CUDA/HIP graphs in a trace: capture windows, replays and the kernels they ran, coverage.

* **Capture.** ``cudaStreamBeginCapture`` ... ``cudaStreamEndCapture`` (HIP: ``hipStream...``,
  driver: ``cuStream...``) on one thread is one graph; its cost runs from the begin call to the
  end of the ``*GraphInstantiate*`` call that follows (recording plus instantiation). Launches
  inside the window are recorded into the graph, not run. A capture annotation such as vLLM's
  ``capture_8192_PIECEWISE`` names the batch size and the mode.
* **Replay.** A graph launch runs its kernels under the launch's correlation id (the ``ac2g``
  flow arrows of the trace carry the same id). Kernels with no launch in the trace that start
  after a graph launch that has none of its own, and before the next graph launch, are taken
  as that graph's (its stream and time window).
* **Coverage** is the device time of graph kernels over all device time in the analysed window;
  the rest (eager launches) is listed by the operator that launched it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from torchdoctor.analysis._join import gpu_rows, in_window, launch_of
from torchdoctor.trace.arrays import member
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.server_steps import graph_launch_rows
from torchdoctor.trace.steps import Steps
from torchdoctor.trace.table import TraceTable

_BEGIN = re.compile(r"^(cuda|hip|cu)StreamBeginCapture")
_END = re.compile(r"^(cuda|hip|cu)StreamEndCapture")
_INSTANTIATE = re.compile(r"^(cuda|hip|cu)GraphInstantiate")
_CAPTURE_LABEL = re.compile(r"capture_(\d+)_([A-Za-z_]+)")
_LAUNCH_CALL = re.compile(r"(Launch|Memcpy|Memset)")
_TOP_EAGER = 8


@dataclass(frozen=True)
class Capture:
    """One graph's capture (microseconds since the trace's first event; costs in ms)."""

    start_us: float
    end_us: float
    record_ms: float
    """Begin-capture call start to end-capture call end: the launches being recorded."""
    instantiate_ms: float
    """The instantiate call after the capture (0 if not in the trace)."""
    recorded_launches: int
    """Kernel, copy and memset launch calls made during the capture."""
    annotation: str
    """The innermost user annotation around the capture ('' if none)."""

    @property
    def cost_ms(self) -> float:
        return (self.end_us - self.start_us) / 1000.0


@dataclass(frozen=True)
class EagerOp:
    """Device work outside any graph, grouped by the operator (or kernel) that launched it."""

    name: str
    activities: int
    gpu_ms: float


@dataclass(frozen=True)
class GraphStats:
    """Graph use in one trace; replay and coverage numbers are over the analysed window."""

    captures: tuple[Capture, ...]
    capture_ms: float
    """Sum of the captures' costs."""
    capture_span_ms: float
    """First capture's start to the last one's end (with the eager work between them)."""
    capture_labels: tuple[str, ...]
    """Batch size and mode of capture annotations ("8192 PIECEWISE"), in order, distinct."""
    steps: int
    steps_in_capture: int
    """Analysed steps whose window overlaps a capture."""
    launch_count: int
    """Graph launches (replays) in the window."""
    launches_without_kernels: int
    """Graph launches in the window with no device activity recorded for them."""
    graph_activity_count: int
    """Device activities run by graph launches in the window."""
    by_stream_window: int
    """Of those, the ones tied to their launch by stream and time window (no correlation)."""
    graph_gpu_ms: float
    """Summed device time of graph activities in the window."""
    eager_gpu_ms: float
    """Summed device time of the other activities in the window."""
    coverage: float | None
    """graph_gpu_ms / (graph_gpu_ms + eager_gpu_ms); None without graph launches or work, or
    when some launches ran no recorded kernel (their device time is not in the trace)."""
    eager_ops: tuple[EagerOp, ...]
    """The device work outside graphs, most device time first."""
    owner: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    """For every device activity of the trace (``gpu_rows`` order), the graph launch row that
    ran it, else -1 (for the rules; not in the JSON)."""

    @property
    def is_capture_trace(self) -> bool:
        """Every analysed step holds a capture: the trace shows start-up, not steady state."""
        return bool(self.captures) and self.steps_in_capture == self.steps

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "owner"}
        d["eager_ops"] = [asdict(o) for o in self.eager_ops]
        d["captures"] = [{**asdict(c), "cost_ms": c.cost_ms} for c in self.captures]
        d["is_capture_trace"] = self.is_capture_trace
        return d


def analyze_graphs(table: TraceTable, steps: Steps) -> GraphStats | None:
    """Capture, replay and coverage; None when the trace has no graph capture or launch."""
    captures = find_captures(table)
    launches = graph_launch_rows(table)
    if not captures and not len(launches):
        return None
    every = gpu_rows(table)
    owner_all = graph_owner(table, every, launches)
    lo, hi = steps.window
    ts = table.ts[every]
    inside = (ts >= lo) & (ts < hi) if hi > lo else ts == lo  # as _join.in_window
    acts, owner = every[inside], owner_all[inside]
    in_graph = owner >= 0
    dur = table.dur[acts]
    window = in_window(table, steps, launches)
    empty = window[~member(window, owner[in_graph])] if len(window) else window
    graph_ms, eager_ms = float(dur[in_graph].sum()) / 1e3, float(dur[~in_graph].sum()) / 1e3
    work = graph_ms + eager_ms
    return GraphStats(
        captures=tuple(captures),
        capture_ms=float(sum(c.cost_ms for c in captures)),
        capture_span_ms=(captures[-1].end_us - captures[0].start_us) / 1e3 if captures else 0.0,
        capture_labels=_capture_labels(table),
        steps=len(steps),
        steps_in_capture=_steps_in_capture(steps, captures),
        launch_count=len(window),
        launches_without_kernels=len(empty),
        graph_activity_count=int(in_graph.sum()),
        by_stream_window=int(
            (in_graph & (table.corr[acts] != table.corr[np.maximum(owner, 0)])).sum()
        ),
        graph_gpu_ms=graph_ms,
        eager_gpu_ms=eager_ms,
        # unknown when some launches' kernels are missing: their device time is not in the trace
        coverage=graph_ms / work if len(window) and work > 0 and not len(empty) else None,
        eager_ops=_eager_ops(table, acts[~in_graph]),
        owner=owner_all,
    )


def graph_owner(table: TraceTable, acts: np.ndarray, launches: np.ndarray) -> np.ndarray:
    """For each device activity, the graph launch row that ran it, else -1.

    By correlation id first; then activities whose launch is not in the trace, starting after a
    graph launch that ran nothing recorded and before the next graph launch, go to that launch.
    """
    out = np.full(len(acts), -1, dtype=np.int64)
    if not len(launches) or not len(acts):
        return out
    order = np.argsort(table.corr[launches], kind="stable")
    corr_sorted, by_corr = table.corr[launches][order], launches[order]
    want = table.corr[acts]
    k = np.clip(np.searchsorted(corr_sorted, want), 0, len(corr_sorted) - 1)
    hit = (corr_sorted[k] == want) & (want >= 0)
    out[hit] = by_corr[k[hit]]
    empty = launches[~member(table.corr[launches], table.corr[acts[hit]])]
    if not len(empty):
        return out
    orphan = np.flatnonzero((launch_of(table, acts) < 0) & ~hit)
    if len(orphan):
        t_all = table.ts[launches]  # launches are in time order
        for i in orphan.tolist():
            j = int(np.searchsorted(t_all, table.ts[acts[i]], side="right")) - 1
            if j >= 0 and launches[j] in empty:
                out[i] = launches[j]
    return out


def find_captures(table: TraceTable) -> list[Capture]:
    """Capture windows in time order (a begin without its end is left out)."""
    kinds = (Kind.RUNTIME, Kind.DRIVER)
    if not len(table.codes_matching(lambda n: bool(_BEGIN.match(n)))):
        return []  # most traces: no pass over the rows
    begins = table.rows_named(lambda n: bool(_BEGIN.match(n)), *kinds)
    if not len(begins):
        return []
    ends = table.rows_named(lambda n: bool(_END.match(n)), *kinds)
    inst = table.rows_named(lambda n: bool(_INSTANTIATE.match(n)), *kinds)
    launch_calls = table.rows_named(lambda n: bool(_LAUNCH_CALL.search(n)), *kinds)
    out = []
    for b in begins.tolist():
        same = ends[(table.ts[ends] > table.ts[b]) & (table.tid[ends] == table.tid[b])]
        if not len(same):
            continue
        e = int(same[0])
        lo, rec_end = float(table.ts[b]), float(table.ts[e] + table.dur[e])
        after = inst[(table.ts[inst] >= rec_end) & (table.tid[inst] == table.tid[b])]
        nxt = begins[table.ts[begins] > table.ts[b]]
        i = (
            int(after[0])
            if len(after) and (not len(nxt) or table.ts[after[0]] < table.ts[nxt[0]])
            else -1
        )
        inst_ms = float(table.dur[i]) / 1e3 if i >= 0 else 0.0
        end = float(table.ts[i] + table.dur[i]) if i >= 0 else rec_end
        inside = launch_calls[(table.ts[launch_calls] > lo) & (table.ts[launch_calls] < rec_end)]
        out.append(
            Capture(lo, end, (rec_end - lo) / 1e3, inst_ms, len(inside), _annotation(table, lo))
        )
    return out


def _annotation(table: TraceTable, t: float) -> str:
    rows = table.of_kind(Kind.USER_ANNOTATION)
    rows = rows[(table.ts[rows] <= t) & (table.ts[rows] + table.dur[rows] >= t)]
    return table.names[int(table.name[rows[np.argmax(table.ts[rows])]])] if len(rows) else ""


def _capture_labels(table: TraceTable) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for name in table.names:
        m = _CAPTURE_LABEL.search(name)
        if m:
            seen[f"{m.group(1)} {m.group(2)}"] = None
    return tuple(seen)


def _steps_in_capture(steps: Steps, captures: list[Capture]) -> int:
    n = 0
    for lo, hi in zip(steps.starts_us, steps.ends_us, strict=True):
        n += any(c.start_us < hi and c.end_us > lo for c in captures)
    return n


def _eager_ops(table: TraceTable, rows: np.ndarray) -> tuple[EagerOp, ...]:
    """Device work outside graphs by launching operator (innermost op owning the launch's
    External id), else by kernel name."""
    if not len(rows):
        return ()
    launch = launch_of(table, rows)
    ext = np.where(launch >= 0, table.ext_id[np.maximum(launch, 0)], -1)
    ops = table.of_kind(Kind.CPU_OP)
    op_ext = table.ext_id[ops]
    order = np.argsort(op_ext, kind="stable")
    op_ext, ops = op_ext[order], ops[order]
    # a name code per row: the operator's where its External id is known, else the kernel's
    code = table.name[rows].astype(np.int64)
    known = np.zeros(len(rows), dtype=bool)
    if len(op_ext):
        k = np.clip(np.searchsorted(op_ext, ext), 0, len(op_ext) - 1)
        known = (ext >= 0) & (op_ext[k] == ext)
        code = np.where(known, table.name[ops[k]], code)
    acc: dict[str, list[float]] = {}
    order = np.argsort(code, kind="stable")
    bounds = np.flatnonzero(np.diff(code[order])) + 1
    for group in np.split(order, bounds):
        name = table.names[int(code[group[0]])]
        slot = acc.setdefault(name if known[group[0]] else short_kernel_name(name), [0, 0.0])
        slot[0] += len(group)
        slot[1] += float(table.dur[rows[group]].sum()) / 1e3
    top = sorted(acc.items(), key=lambda kv: -kv[1][1])[:_TOP_EAGER]
    return tuple(EagerOp(n, int(c), round(ms, 4)) for n, (c, ms) in top)


def short_kernel_name(name: str) -> str:
    """A kernel's name without ``void``, namespaces, template and call arguments."""
    n = name.removeprefix("void ")
    for stop in ("<", "("):
        if stop in n:
            n = n[: n.index(stop)]
    return n.rsplit("::", 1)[-1].strip() or name
