"""The data behind the HTML timeline: one representative step, its lanes, downsampled.

Lanes: each GPU stream (activities coloured by kernel category), the device's idle gaps
(coloured by cause, the same split the breakdown sums), and the CPU side: DataLoader waits,
synchronising calls, kernel launches and top-level operators. Events shorter than one "pixel"
(the step divided into ``BINS``) are merged with their neighbours, so the page size depends on
the step's structure at that resolution, not on the trace's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from torchdoctor.analysis import intervals as iv
from torchdoctor.analysis.breakdown import IDLE_PARTS, gap_causes
from torchdoctor.analysis.breakdown_terms import label as part_label
from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.analysis.gpu_activity import DEVICE_CLASSES
from torchdoctor.analysis.kernel_names import kernel_category
from torchdoctor.rules.thresholds import RARE_LONG_MIN_MS, RARE_LONG_RATIO
from torchdoctor.trace.kinds import Kind

BINS = 4000
"""Resolution: events shorter than step/BINS merge with their neighbours (8x zoom on a laptop)."""
MAX_STREAMS = 8
"""GPU streams drawn (the busiest first); the rest are summarised in a note."""
_LAUNCH_WORDS = ("LaunchKernel", "LaunchCooperativeKernel", "GraphLaunch", "ModuleLaunchKernel")


@dataclass
class Lane:
    """One row of the timeline; events as parallel lists (start and duration in us from the
    step start, a colour key and an index into the page's name table)."""

    label: str
    start_us: list[float] = field(default_factory=list)
    dur_us: list[float] = field(default_factory=list)
    color: list[str] = field(default_factory=list)
    name: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Timeline:
    """A representative step as lanes of (possibly merged) events."""

    step: int
    step_ms: float
    why: str
    """Why this step was chosen."""
    lanes: list[Lane]
    names: list[str]
    merged_events: int
    """Source events that were merged into wider blocks by the downsampling."""
    source_events: int
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        """Compact JSON for the page's script: lanes of parallel arrays."""
        return {
            "step": self.step,
            "step_ms": round(self.step_ms, 4),
            "why": self.why,
            "names": self.names,
            "lanes": [
                {
                    "label": ln.label,
                    "s": [round(x, 3) for x in ln.start_us],
                    "d": [round(x, 3) for x in ln.dur_us],
                    "c": ln.color,
                    "n": ln.name,
                }
                for ln in self.lanes
            ],
        }


def representative_step(a: TraceAnalysis) -> tuple[int, str]:
    """Index of the step to draw, and why: the longest step when it is a rare long one (at
    least RARE_LONG_RATIO times the median, the step a finding is about), else the step whose
    time is the median: the upper one for an even count, because a trace's last step is often
    cut short (closed by its own work's end) and of two steps the lower median would be that
    stub."""
    times = a.steps.durations_ms
    if len(times) == 0:
        raise ValueError("no steps to draw")
    order = np.argsort(times, kind="stable")
    k = int(order[len(times) // 2])
    longest = int(order[-1])
    typical = float(times[k])
    if (
        len(times) >= 3
        and times[longest] >= RARE_LONG_RATIO * typical
        and times[longest] - typical >= RARE_LONG_MIN_MS
    ):
        # A stall in one step is what the page must show: the median step would hide it.
        return longest, (
            f"the longest step ({times[longest]:.2f} ms, {times[longest] / typical:.1f}x the "
            f"median step's {typical:.2f} ms, of {len(times)} steps)"
        )
    return k, f"the median step ({times[k]:.2f} ms of {len(times)} steps)"


def build_timeline(a: TraceAnalysis, bins: int = BINS) -> Timeline | None:
    """The representative step's lanes, downsampled to ``bins`` across the step."""
    if a.n_steps == 0:
        return None
    k, why = representative_step(a)
    lo, hi = float(a.steps.starts_us[k]), float(a.steps.ends_us[k])
    names: dict[str, int] = {}
    raw: list[tuple[str, np.ndarray, np.ndarray, list[str], list[str]]] = []
    notes: list[str] = []
    raw.extend(_gpu_lanes(a, lo, hi, notes))
    if a.has_gpu:
        raw.append(_idle_lane(a, lo, hi))
    raw.extend(_cpu_lanes(a, lo, hi))
    res = max((hi - lo) / bins, 1e-3)
    lanes, merged, total = [], 0, 0
    for label, s, e, colors, labels in raw:
        lane, m = _downsample(label, s - lo, e - lo, colors, labels, res, names)
        lanes.append(lane)
        merged += m
        total += len(s)
    step_no = a.steps.numbers[k]
    return Timeline(step_no, (hi - lo) / 1000.0, why, lanes, list(names), merged, total, notes)


def _in(s: np.ndarray, e: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    keep = (e > lo) & (s < hi)
    return np.clip(s[keep], lo, hi), np.clip(e[keep], lo, hi)


def _gpu_lanes(a: TraceAnalysis, lo: float, hi: float, notes: list[str]) -> list[Any]:
    act, t = a.activity, a.table
    if not len(act.rows):
        return []
    keep = (act.end_us > lo) & (act.start_us < hi)
    rows, s, e, cls = act.rows[keep], act.start_us[keep], act.end_us[keep], act.cls[keep]
    key = t.device[rows].astype(np.int64) * 100000 + t.stream[rows]
    busy = {int(k): float(np.sum(e[key == k] - s[key == k])) for k in np.unique(key)}
    ranked = sorted(busy, key=lambda k: -busy[k])
    if len(ranked) > MAX_STREAMS:
        notes.append(f"{len(ranked) - MAX_STREAMS} quieter streams not drawn")
    out = []
    for k in sorted(ranked[:MAX_STREAMS]):
        m = key == k
        labels = [t.names[c] for c in t.name[rows[m]]]
        colors = [_category(n, DEVICE_CLASSES[c]) for n, c in zip(labels, cls[m], strict=True)]
        cs, ce = np.clip(s[m], lo, hi), np.clip(e[m], lo, hi)
        out.append((f"GPU {k // 100000} stream {k % 100000}", cs, ce, colors, labels))
    return out


def _category(name: str, cls: str) -> str:
    """Colour key of a device activity: the kernel category for compute, else its class."""
    if cls != "compute":
        return cls
    return str(kernel_category(name.lower()))


def _idle_lane(a: TraceAnalysis, lo: float, hi: float) -> Any:
    """Idle gaps, each drawn as its causes in order: data loading, then synchronisation or host
    overhead (the CPU was late), then the short remainder (queued work starting)."""
    act = a.activity
    g0, g1 = iv.gaps(iv.union(act.start_us, act.end_us), lo, hi)
    if not len(g0):
        return ("GPU idle (by cause)", np.zeros(0), np.zeros(0), [], [])
    parts = gap_causes((g0, g1), act, lo)
    starts, ends, colors = [], [], []
    cursor = g0.copy()
    for cause in IDLE_PARTS:
        length = parts[cause]
        m = length > 0
        starts.append(cursor[m])
        ends.append(cursor[m] + length[m])
        colors.extend([f"idle:{cause}"] * int(m.sum()))
        cursor = cursor + length
    s, e = np.concatenate(starts), np.concatenate(ends)
    order = np.argsort(s, kind="stable")
    colors = [colors[i] for i in order]
    labels = [part_label(c) for c in colors]
    return ("GPU idle (by cause)", s[order], e[order], colors, labels)


def _cpu_lanes(a: TraceAnalysis, lo: float, hi: float) -> list[Any]:
    t, act = a.table, a.activity
    out = []
    for label, ranges, color in (
        ("CPU data loading", act.dataloader, "cpu:data_wait"),
        ("CPU synchronisation", act.sync_calls, "cpu:sync"),
        ("CPU collectives", act.cpu_collectives, "cpu:communication"),
    ):
        s, e = _in(ranges[0], ranges[1], lo, hi)
        out.append((label, s, e, [color] * len(s), [label[4:]] * len(s)))
    launch = t.rows_named(lambda n: any(w in n for w in _LAUNCH_WORDS), Kind.RUNTIME)
    out.append(_rows_lane("CPU kernel launches", a, launch, lo, hi, "cpu:launch"))
    ops = _top_level_ops(a, lo, hi)
    out.append(_rows_lane("CPU operators, annotations", a, ops, lo, hi, "cpu:op"))
    return out


def _rows_lane(label: str, a: TraceAnalysis, rows: np.ndarray, lo: float, hi: float, c: str) -> Any:
    t = a.table
    keep = rows[(t.ts[rows] + t.dur[rows] > lo) & (t.ts[rows] < hi)]
    s, e = np.clip(t.ts[keep], lo, hi), np.clip(t.ts[keep] + t.dur[keep], lo, hi)
    return (label, s, e, [c] * len(keep), [t.names[n] for n in t.name[keep]])


def _top_level_ops(a: TraceAnalysis, lo: float, hi: float) -> np.ndarray:
    """CPU operators and annotations not nested in another of the same thread, in the step."""
    t = a.table
    rows = t.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION)
    rows = rows[(t.ts[rows] >= lo) & (t.ts[rows] < hi)]
    rows = rows[[not t.names[n].startswith("ProfilerStep#") for n in t.name[rows]]]
    keep: list[int] = []
    end_by_thread: dict[
        tuple[int, int], float
    ] = {}  # rows are in start order: a row inside the last kept is nested
    for r in rows:
        th = (int(t.pid[r]), int(t.tid[r]))
        if t.ts[r] >= end_by_thread.get(th, -np.inf):
            keep.append(int(r))
            end_by_thread[th] = t.ts[r] + t.dur[r]
    return np.array(keep, dtype=np.int64)


def _downsample(
    label: str,
    s: np.ndarray,
    e: np.ndarray,
    colors: list[str],
    labels: list[str],
    res_us: float,
    names: dict[str, int],
) -> tuple[Lane, int]:
    """Merge runs of sub-resolution events (gaps under res_us too) into one block each.

    A merged block takes the colour with the most time in it and is named "N events". Returns
    the lane and how many source events were merged away.
    """
    lane, merged = Lane(label), 0
    order = np.argsort(s, kind="stable")
    run: list[int] = []
    run_end = -np.inf
    for i in order:
        small = e[i] - s[i] < res_us
        if run and small and s[i] - run_end < res_us:
            run.append(int(i))
            run_end = max(run_end, float(e[i]))
            continue
        merged += _flush(lane, run, s, e, colors, labels, names)
        run, run_end = ([int(i)], float(e[i])) if small else ([], -np.inf)
        if not small:
            _emit(lane, s[i], e[i], colors[i], labels[i], names)
    merged += _flush(lane, run, s, e, colors, labels, names)
    return lane, merged


def _flush(lane: Lane, run: list[int], s: Any, e: Any, colors: Any, labels: Any, names: Any) -> int:
    if not run:
        return 0
    if len(run) == 1:
        i = run[0]
        _emit(lane, s[i], e[i], colors[i], labels[i], names)
        return 0
    time_by_color: dict[str, float] = {}
    for i in run:
        time_by_color[colors[i]] = time_by_color.get(colors[i], 0.0) + float(e[i] - s[i])
    color = max(time_by_color, key=lambda c: time_by_color[c])
    _emit(lane, s[run[0]], max(e[i] for i in run), color, f"{len(run)} events", names)
    return len(run) - 1


def _emit(lane: Lane, s: float, e: float, color: str, name: str, names: dict[str, int]) -> None:
    lane.start_us.append(float(s))
    lane.dur_us.append(float(e - s))
    lane.color.append(color)
    lane.name.append(names.setdefault(name, len(names)))
