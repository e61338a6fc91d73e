"""Steps of an inference engine, for traces without ``ProfilerStep`` markers.

A serving engine's profiler window holds its iterations, not ``prof.step()`` calls. Three kinds
of signal mark them, used in this order by ``trace/steps.py``:

* **step annotations** (before the optimizer and DataLoader signals): SGLang's
  ``step[DECODE bs=32]`` / ``step[EXTEND bs=15 toks=15360]``, the
  ``execute_<tokens>_context_<n>(...)_generation_<n>(...)`` ranges that TraceLens-patched
  engines write, or vLLM's ``execute_model`` (a ``record_function`` range, or the Python frame
  when the trace was recorded ``with_stack``);
* **repeating graph launches** (after them): the sequence of CUDA/HIP graph launches, each
  described by the kernels it ran, repeats with some period; each period is one iteration;
* **the model's top-level forward**: the outermost ``nn.Module: Name`` frame (``with_modules``)
  that repeats.
"""

from __future__ import annotations

import re
from typing import Literal

import numpy as np

from torchdoctor.trace.arrays import member, unique_codes
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.table import TraceTable

# Patterns as strings: ``re`` compiles one on first use, and a trace with ProfilerStep markers
# never asks for the engines' iteration names.
SGLANG_STEP = r"^step\[([A-Za-z_]+)([^\]]*)\]$"
EXECUTE_STEP = r"^execute_(\d+)_context_(\d+)\((.*?)\)_generation_(\d+)\((.*?)\)$"
EXECUTE_MODEL = r"(^|[\s:.])execute_model$"
FORWARD_STEP_MARK = "torchdoctor: model-call step"
"""What ``torchdoctor check`` writes into a trace whose steps are top-level model calls."""
GRAPH_LAUNCH = ("cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch")
"""Name prefixes of a graph launch (runtime or driver call)."""
_GRAPH_EVENT = (*GRAPH_LAUNCH, *(f"{api}StreamBeginCapture" for api in ("cuda", "hip", "cu")))
_MODULE = "nn.Module: "
Engine = Literal["vLLM", "SGLang", "transformers", "TensorRT-LLM", "unknown"]
_ENGINE_MARKS: tuple[tuple[str, Engine], ...] = (
    ("sglang", "SGLang"),
    ("sgl_kernel", "SGLang"),
    ("vllm", "vLLM"),
    ("tensorrt_llm", "TensorRT-LLM"),
    ("transformers/generation", "transformers"),
)
_LAUNCH_KINDS = np.array((Kind.RUNTIME, Kind.DRIVER), dtype=np.uint8)
_GPU = np.array((Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET), dtype=np.uint8)


def detect_engine(table: TraceTable) -> Engine:
    """The serving engine, from operator names and Python frames (``unknown`` if none).

    Here rather than in ``analysis/serving.py`` (which re-exports it): the fusion rule asks it of
    every trace, and most traces never need the serving analysis's module."""
    text = [n.lower() for n in table.names]
    for mark, engine in _ENGINE_MARKS:
        if any(mark in n for n in text):
            return engine
    return "unknown"


def step_annotation_rows(table: TraceTable) -> np.ndarray:
    """Rows of the engine's iteration ranges (outermost, in time order), or an empty array.

    The first family present wins: ``step[...]``, then ``execute_<n>_...``, then
    ``execute_model``.
    """
    cpu = member(table.kind, np.array((Kind.USER_ANNOTATION, Kind.CPU_OP), dtype=np.uint8))
    families = (
        (cpu, lambda n: bool(re.match(SGLANG_STEP, n))),
        (cpu, lambda n: bool(re.match(EXECUTE_STEP, n))),
        (cpu | (table.kind == Kind.PYTHON_FUNCTION), lambda n: bool(re.search(EXECUTE_MODEL, n))),
    )
    for kinds, predicate in families:
        codes = table.codes_matching(predicate)
        if len(codes):
            rows = np.flatnonzero(kinds & member(table.name, codes))
            if len(rows):
                return outermost(table, rows)
    return np.zeros(0, dtype=np.int64)


def graph_launch_rows(table: TraceTable) -> np.ndarray:
    """Rows of ``cudaGraphLaunch`` / ``hipGraphLaunch`` (runtime or driver) calls."""
    codes = table.codes_matching(lambda n: n.startswith(GRAPH_LAUNCH))
    if not len(codes):  # most traces: no pass over the rows
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(member(table.name, codes) & member(table.kind, _LAUNCH_KINDS))


def graph_replay_rows(table: TraceTable) -> np.ndarray:
    """The graph launch that opens each iteration, when the launches repeat with a period.

    Each launch is described by how many device activities it ran and the first one's name;
    the shortest period over which that sequence repeats (at least twice) is one iteration.
    """
    launches = graph_launch_rows(table)
    if len(launches) < 2:
        return np.zeros(0, dtype=np.int64)
    sig = _launch_signatures(table, launches)
    n = len(sig)
    for p in range(1, n // 2 + 1):
        if all(sig[i] == sig[i + p] for i in range(n - p)):
            return launches[::p][: n // p]
    return np.zeros(0, dtype=np.int64)


def _launch_signatures(table: TraceTable, launches: np.ndarray) -> list[tuple[int, int]]:
    gpu = np.flatnonzero(member(table.kind, _GPU))
    order = np.argsort(table.corr[gpu], kind="stable")  # by correlation, then time
    gpu, corr = gpu[order], table.corr[gpu][order]
    want = table.corr[launches]
    lo, hi = np.searchsorted(corr, want, "left"), np.searchsorted(corr, want, "right")
    count = np.where(want >= 0, hi - lo, 0)
    first = [
        int(table.name[gpu[a]]) if c else -1
        for a, c in zip(lo.tolist(), count.tolist(), strict=True)
    ]
    return list(zip(count.tolist(), first, strict=True))


def forward_rows(table: TraceTable) -> np.ndarray:
    """Outermost ``nn.Module: Name`` frames of the module called most often at the top (two or
    more calls), in time order."""
    codes = table.codes_matching(lambda n: n.startswith(_MODULE))
    if not len(codes):
        return np.zeros(0, dtype=np.int64)
    rows = np.flatnonzero((table.kind == Kind.PYTHON_FUNCTION) & member(table.name, codes))
    top = outermost(table, rows)
    if len(top) < 2:
        return np.zeros(0, dtype=np.int64)
    names, _, counts = unique_codes(table.name[top])
    best = names[int(np.argmax(counts))]
    if counts.max() < 2:
        return np.zeros(0, dtype=np.int64)
    return top[table.name[top] == best]


def outermost(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """Drop ranges nested inside an earlier one (a wrapper calling the same function)."""
    keep, last_end = [], -np.inf
    for r in rows.tolist():
        if table.ts[r] >= last_end:
            keep.append(r)
            last_end = table.ts[r] + table.dur[r]
    return np.array(keep, dtype=np.int64)


SERVING_SOURCES = ("server-step", "graph-replay", "forward")


def has_graph_events(table: TraceTable) -> bool:
    """The trace names a graph launch or a capture (a pass over the names, not the rows)."""
    return any(n.startswith(_GRAPH_EVENT) for n in table.names)


def is_serving(table: TraceTable, source: str) -> bool:
    """Steps that are an engine's iterations, or ``check``'s model-call steps."""
    return source in SERVING_SOURCES or FORWARD_STEP_MARK in table.names
