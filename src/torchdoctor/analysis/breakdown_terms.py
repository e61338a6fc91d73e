"""The step breakdown's parts in words: one label per part, for every command and every form.

``analyze``'s breakdown table, ``compare``'s delta table and its verdict ("explained by ..."),
the HTML pages' bars and legends and both JSON documents name a part by its key and print it by
the label here, so the same part never reads two ways (the terms are defined in
docs/breakdown.md; ``analysis/breakdown.py`` computes them).

A part's key is qualified by where its time sits: ``busy:`` (the device ran it), ``idle:`` (the
device idled, split by cause) or ``cpu:`` (a CPU-only trace's parts, no device in it).
"""

# Annotations evaluated, not strings: typing.NamedTuple compiles each string one (0.4M
# instructions a field, at every start-up).

from collections.abc import Mapping
from typing import NamedTuple

from torchdoctor.analysis.breakdown import NOT_RECORDED


# A named tuple: analyze imports it before any trace (rules/spec.py says what a dataclass costs).
class Term(NamedTuple):
    """How one part reads."""

    label: str
    """Its row in a breakdown table, its segment in a chart (``idle: data loading``)."""
    name: str
    """The cause or kind alone, for a sentence (``explained by data loading``)."""


TERMS: dict[str, Term] = {
    "busy:compute": Term("GPU compute", "GPU compute"),
    "busy:communication": Term("GPU communication (exposed)", "exposed GPU communication"),
    "busy:memcpy_h2d": Term("GPU memcpy host→device", "host-to-device copies"),
    "busy:memcpy_d2h": Term("GPU memcpy device→host", "device-to-host copies"),
    "busy:memcpy_d2d": Term("GPU memcpy device→device", "device-to-device copies"),
    "busy:memcpy_other": Term("GPU memcpy other", "other copies"),
    "busy:memset": Term("GPU memset", "memsets"),
    "idle:data_loading": Term("idle: data loading", "data loading"),
    "idle:synchronization": Term("idle: synchronization", "synchronization"),
    "idle:collective_wait": Term("idle: collective wait (CPU in a collective)", "collective wait"),
    "idle:input_pipeline": Term(
        "idle: input pipeline (step starts outside torch)", "the input pipeline"
    ),
    "idle:host_overhead": Term("idle: host overhead (launched late)", "host overhead"),
    "idle:short_gaps": Term("idle: short gaps (kernel-to-kernel latency)", "short gaps"),
    "idle:dependency_wait": Term("idle: dependency wait (queued, not started)", "dependency waits"),
    f"idle:{NOT_RECORDED}": Term(
        "not recorded: GPU work not in the trace", "GPU work not in the trace"
    ),
    "cpu:cpu_operators": Term("CPU operators", "CPU operators"),
    "cpu:communication": Term("CPU collectives", "CPU collectives"),
    "cpu:data_loading": Term("data loading", "data loading"),
    "cpu:input_pipeline": Term("input pipeline (step starts outside torch)", "the input pipeline"),
    "cpu:other": Term("CPU other (Python, glue)", "other CPU work (Python, glue)"),
}
"""Every part of ``BUSY_PARTS``, ``IDLE_PARTS`` (and ``not_recorded``) and ``CPU_PARTS``."""

STEP_LABEL = "step"
"""The row that sums the parts."""


def qualified(part: str, *, gpu: bool, busy: bool) -> str:
    """A part of ``StepBreakdown.busy_ms`` (``busy``) or ``idle_ms`` as its key here: a CPU-only
    trace's ``idle_ms`` holds the ``cpu:`` parts."""
    if busy:
        return f"busy:{part}"
    return f"{'idle' if gpu else 'cpu'}:{part}"


def keyed(busy_ms: Mapping[str, float], idle_ms: Mapping[str, float]) -> dict[str, float]:
    """One breakdown's parts by their keys here (a breakdown with no busy parts is CPU-only)."""
    gpu = bool(busy_ms)
    out = {qualified(k, gpu=gpu, busy=True): v for k, v in busy_ms.items()}
    out.update({qualified(k, gpu=gpu, busy=False): v for k, v in idle_ms.items()})
    return out


def label(key: str) -> str:
    """The part's label (an unknown key in words: ``idle:new_part`` -> ``idle: new part``)."""
    term = TERMS.get(key)
    return term.label if term else key.replace("_", " ").replace(":", ": ")


def name(key: str) -> str:
    """The part alone, for a sentence (an unknown key: its last word group)."""
    term = TERMS.get(key)
    return term.name if term else key.rpartition(":")[2].replace("_", " ")


def labels(keys: list[str] | tuple[str, ...] | Mapping[str, object]) -> dict[str, str]:
    """Key -> label for ``keys``, in their order (the JSON documents carry this beside the
    numbers, so a reader prints what the text prints)."""
    return {k: label(k) for k in keys}
