"""Kernel table: where the GPU time goes, by kernel and by category, and tensor-core use.

Every device activity (kernel, memcpy, memset) that starts inside the analysed window counts.
Durations are summed per activity (not a union of intervals), so overlapping kernels on several
streams each count their full time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from torchdoctor.analysis._join import gpu_rows, in_window, launch_of
from torchdoctor.analysis.kernel_names import (
    KERNEL_CATEGORIES,
    KERNEL_DTYPES,
    MATMUL_CATEGORIES,
    KernelCategory,
    KernelDtype,
    classify_kernel,
    input_type_dtype,
)
from torchdoctor.analysis.op_classes import classify_op
from torchdoctor.trace.arrays import first_index, member, unique_codes
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.steps import Steps
from torchdoctor.trace.table import TraceTable

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord

_TC_STATES = (False, True, None)  # index 0, 1, 2 in the per-row tensor-core code
_HALF_DTYPES = ("fp16", "bf16", "fp8", "int8")


# A named tuple: analyze imports it before any trace (rules/spec.py says what a dataclass costs).
class KernelContext(NamedTuple):
    """What the run recorded beside its trace, for kernels whose names leave the math open."""

    autocast_dtype: KernelDtype | None = None
    """The autocast dtype the run used (``check`` records it), or None: a GEMM/attention kernel
    launched by a matmul or attention operator whose dtype nothing else gives runs in it."""
    tf32_matmul: bool | None = None
    """The run's TF32 state for fp32 matmuls (None: not recorded): with it off, an fp32 GEMM
    whose name leaves the question open ran on CUDA cores; with it on, on tensor cores in TF32."""

    @classmethod
    def from_record(cls, run: RunRecord) -> KernelContext:
        """The context a ``check`` record holds: the one enabled CUDA autocast dtype (none when
        the run used several or none) and ``backend_flags.tf32_matmul``."""
        dtypes = {
            _AUTOCAST_DTYPES.get(e.dtype)
            for e in run.config.autocast
            if e.enabled and (e.device or e.device_type or "cuda") == "cuda"
        }
        tf32 = run.config.backend_flags.get("tf32_matmul")
        return cls(
            autocast_dtype=dtypes.pop() if len(dtypes) == 1 else None,
            tf32_matmul=tf32 if isinstance(tf32, bool) else None,
        )


_AUTOCAST_DTYPES: dict[str, KernelDtype] = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}


@dataclass(frozen=True)
class GpuInfo:
    """The GPU the kernels ran on, from the trace's deviceProperties."""

    name: str | None
    compute_capability: tuple[int, int] | None
    has_tensor_cores: bool | None
    """Volta (sm70) and later NVIDIA GPUs; AMD GPUs of gfx9 (CDNA) and later; None if unknown."""
    total_memory_bytes: int | None


@dataclass(frozen=True)
class KernelRow:
    """One kernel name, summed over its launches in the window."""

    name: str
    category: KernelCategory
    count: int
    total_ms: float
    mean_us: float
    share_of_gpu_time: float
    """This name's summed duration over all device activities' summed duration."""
    tensor_core: bool | None
    """For GEMM/convolution/attention kernels: ran on tensor cores (by name, else inferred from
    the launching operator's dtype); None where unknown or not applicable."""
    dtype: KernelDtype
    family: str = "unknown"
    """The name grammar that read it (``kernel_names.KernelNameInfo.family``)."""
    dtype_in_name: bool = True
    """False where the family's names carry no input dtype (none claimed from the name)."""

    @property
    def classified(self) -> bool:
        """A name some family grammar read; for GEMM/conv/attention also tensor-core use
        (yes/no) and a dtype, or a family whose names cannot carry one."""
        if self.family == "unknown":
            return False
        if self.category not in MATMUL_CATEGORIES and self.category != "attention":
            return True
        return self.tensor_core is not None and (self.dtype != "unknown" or not self.dtype_in_name)


@dataclass(frozen=True)
class KernelStats:
    """Kernel and category totals over the analysed window."""

    steps: int
    activity_count: int
    """Kernels, memcpys and memsets that started in the window."""
    kernel_count: int
    gpu_time_ms: float
    """Summed duration of all those activities (not a union)."""
    time_by_category_ms: dict[str, float]
    count_by_category: dict[str, int]
    top_kernels: tuple[KernelRow, ...]
    matmul_ms: float
    """Summed duration of GEMM and convolution kernels."""
    tensor_core_ms: float
    off_tensor_core_ms: float
    unknown_tensor_core_ms: float
    tensor_core_share: float | None
    """tensor_core_ms / matmul_ms (None without GEMM/conv time); unknown time counts against."""
    matmul_ms_by_dtype: dict[str, float]
    fp32_off_tensor_core_ms: float
    """GEMM/conv time in fp32 SIMT kernels: the time bf16 autocast or TF32 could speed up."""
    gpu: GpuInfo
    unclassified_ms: float = 0.0
    """Summed duration of kernels no family grammar recognised (family "unknown")."""
    unclassified_names: int = 0
    """How many distinct kernel names that is."""
    peak_tflops_by_dtype: dict[str, float] = field(default_factory=dict)
    """Dense datasheet peak (TFLOP/s) of this GPU for each GEMM/conv dtype seen: ``fp32`` is
    the CUDA-core rate, ``tf32`` the TF32 tensor-core rate (``hardware.py``); empty when the GPU
    is not in the table."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data."""
        d = asdict(self)
        d["top_kernels"] = [asdict(r) for r in self.top_kernels]
        return d


def analyze_kernels(
    table: TraceTable, steps: Steps, top_n: int = 20, context: KernelContext | None = None
) -> KernelStats:
    """Top kernels by total time, time per category, and GEMM/conv tensor-core use and dtype
    (the name's family grammar first, then the launching operator and the run's ``context``)."""
    rows = in_window(table, steps, gpu_rows(table))
    dur = table.dur[rows]
    codes, inv, _ = unique_codes(table.name[rows])
    first_kind = table.kind[rows][first_index(inv, len(codes))]
    cats = [_category(table.names[c], Kind(k)) for c, k in zip(codes, first_kind, strict=True)]
    cats = _by_parent(table, rows, codes, inv, cats)
    gpu = gpu_info(table, rows)
    dtype_idx, tc_idx = _row_dtype_and_tc(table, rows, codes, inv, cats, gpu, context)
    unknown = np.array([classify_kernel(table.names[c]).family == "unknown" for c in codes])
    cat_idx = np.array([KERNEL_CATEGORIES.index(c) for c in cats], dtype=np.int64)[inv]
    matmul = member(cat_idx, [KERNEL_CATEGORIES.index(c) for c in MATMUL_CATEGORIES])
    total = float(dur.sum())
    tc_ms = [float(dur[matmul & (tc_idx == i)].sum()) / 1e3 for i in range(3)]
    matmul_ms = float(dur[matmul].sum()) / 1e3
    by_dtype = np.bincount(dtype_idx[matmul], dur[matmul], minlength=len(KERNEL_DTYPES)) / 1e3
    fp32_off = matmul & (tc_idx == 0) & (dtype_idx == KERNEL_DTYPES.index("fp32"))
    return KernelStats(
        steps=len(steps),
        activity_count=len(rows),
        kernel_count=int((table.kind[rows] == Kind.KERNEL).sum()),
        gpu_time_ms=total / 1e3,
        time_by_category_ms=_by_category(cat_idx, dur),
        count_by_category=_by_category(cat_idx, None),
        top_kernels=_top(table, codes, inv, cats, dur, dtype_idx, tc_idx, top_n),
        matmul_ms=matmul_ms,
        tensor_core_ms=tc_ms[1],
        off_tensor_core_ms=tc_ms[0],
        unknown_tensor_core_ms=tc_ms[2],
        tensor_core_share=tc_ms[1] / matmul_ms if matmul_ms > 0 else None,
        matmul_ms_by_dtype={d: float(v) for d, v in zip(KERNEL_DTYPES, by_dtype, strict=True) if v},
        fp32_off_tensor_core_ms=float(dur[fp32_off].sum()) / 1e3,
        gpu=gpu,
        unclassified_ms=float(dur[unknown[inv]].sum()) / 1e3 if len(codes) else 0.0,
        unclassified_names=int(unknown.sum()),
        peak_tflops_by_dtype=_peaks(gpu, by_dtype),
    )


def _peaks(gpu: GpuInfo, by_dtype: np.ndarray) -> dict[str, float]:
    """Datasheet dense peak per GEMM/conv dtype with time (see ``KernelStats``)."""
    from torchdoctor.hardware import peak_flops

    out: dict[str, float] = {}
    for d, v in zip(KERNEL_DTYPES, by_dtype, strict=True):
        rate = peak_flops(gpu.name, d) if gpu.name and v > 0 else None
        if rate:
            out[d] = rate / 1e12
    return out


def _category(name: str, kind: Kind) -> KernelCategory:
    if kind == Kind.MEMCPY:
        return "memcpy"
    if kind == Kind.MEMSET:
        return "memset"
    return classify_kernel(name).category


def _by_category(cat_idx: np.ndarray, dur: np.ndarray | None) -> dict[str, Any]:
    sums = np.bincount(cat_idx, dur, minlength=len(KERNEL_CATEGORIES))
    if dur is None:
        return {c: int(v) for c, v in zip(KERNEL_CATEGORIES, sums, strict=True) if v}
    return {c: float(v) / 1e3 for c, v in zip(KERNEL_CATEGORIES, sums, strict=True) if v}


def _row_dtype_and_tc(
    table: TraceTable,
    rows: np.ndarray,
    codes: np.ndarray,
    inv: np.ndarray,
    cats: list[KernelCategory],
    gpu: GpuInfo,
    context: KernelContext | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row dtype index (into KERNEL_DTYPES) and tensor-core code (0 no, 1 yes, 2 unknown).

    The name decides; where it is silent about the dtype, the launching operator's
    ``Input type`` does (kernel corr -> launch call -> External id -> input_types), then the
    run's autocast dtype for kernels a matmul or attention operator launched.
    """
    infos = [classify_kernel(table.names[c]) for c in codes]
    name_dtype = np.array([KERNEL_DTYPES.index(i.dtype) for i in infos], dtype=np.int64)
    name_tc = np.array([_TC_STATES.index(i.tensor_core) for i in infos], dtype=np.int64)
    is_mm = np.array([c in MATMUL_CATEGORIES or c == "attention" for c in cats], dtype=bool)
    dtype_idx, tc_idx = name_dtype[inv], name_tc[inv]
    silent = is_mm[inv] & (dtype_idx == KERNEL_DTYPES.index("unknown"))
    if silent.any() and table.input_types:
        dtype_idx[silent] = _input_dtypes(table, rows[silent])
    unknown = KERNEL_DTYPES.index("unknown")
    silent &= dtype_idx == unknown
    if silent.any() and context is not None and context.autocast_dtype:
        under = _launched_by_compute_op(table, rows[silent])
        dtype_idx[np.flatnonzero(silent)[under]] = KERNEL_DTYPES.index(context.autocast_dtype)
    tc_idx = _resolve_tc(tc_idx, dtype_idx, is_mm[inv], gpu)
    tf32 = context.tf32_matmul if context is not None else None
    if tf32 is not None and gpu.has_tensor_cores and (gpu.compute_capability or (0, 0)) >= (8, 0):
        fp32_open = is_mm[inv] & (tc_idx == 2) & (dtype_idx == KERNEL_DTYPES.index("fp32"))
        tc_idx[fp32_open] = 1 if tf32 else 0
        if tf32:
            dtype_idx[fp32_open] = KERNEL_DTYPES.index("tf32")
    return dtype_idx, tc_idx


def _launched_by_compute_op(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """For each device row, whether the operator that launched it is a matmul, convolution or
    attention."""
    return np.array([c in _OP_CATEGORY for c in _op_classes(table, rows)], dtype=bool)


_OP_CATEGORY: dict[str, KernelCategory] = {
    "matmul": "gemm",
    "convolution": "convolution",
    "attention": "attention",
}


def _op_classes(table: TraceTable, rows: np.ndarray) -> list[str]:
    """For each device row, the class (``op_classes``) of the operator that launched it (kernel
    corr -> launch call -> External id -> CPU op), "" where none is recorded."""
    launch = launch_of(table, rows)
    ext = np.where(launch >= 0, table.ext_id[np.maximum(launch, 0)], -1)
    ops = np.flatnonzero(table.kind == Kind.CPU_OP)
    ops = ops[table.ext_id[ops] >= 0]
    by_ext = {
        int(e): classify_op(table.names[code])
        for e, code in zip(table.ext_id[ops], table.name[ops], strict=True)
    }
    return [by_ext.get(int(e), "") for e in ext]


def _by_parent(
    table: TraceTable,
    rows: np.ndarray,
    codes: np.ndarray,
    inv: np.ndarray,
    cats: list[KernelCategory],
) -> list[KernelCategory]:
    """Categories with an unrecognised name's taken from its launching operator: a kernel no
    family reads, launched mostly by a matmul (convolution, attention) operator, counts as GEMM
    (convolution, attention) time, its tensor-core use unknown, never "off"."""
    open_codes = [
        i
        for i, c in enumerate(codes)
        if cats[i] == "other" and classify_kernel(table.names[c]).family == "unknown"
    ]
    if not open_codes:
        return cats
    classes = _op_classes(table, rows)
    out = list(cats)
    for i in open_codes:
        mine = [classes[j] for j in np.flatnonzero(inv == i)]
        votes = [c for c in mine if c in _OP_CATEGORY]
        if votes and 2 * len(votes) > len(mine):
            out[i] = _OP_CATEGORY[max(set(votes), key=votes.count)]
    return out


def _input_dtypes(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """Dtype index of each row's launching operator, from its ``Input type`` (else unknown)."""
    ext = np.full(len(rows), -1, dtype=np.int64)
    launch = launch_of(table, rows)
    ext[launch >= 0] = table.ext_id[launch[launch >= 0]]
    keys = np.fromiter(table.input_types.keys(), dtype=np.int64, count=len(table.input_types))
    raws = list(table.input_types.values())
    uniq = {r: KERNEL_DTYPES.index(input_type_dtype(r)) for r in set(raws)}
    vals = np.array([uniq[r] for r in raws], dtype=np.int64)
    order = np.argsort(keys)
    keys, vals = keys[order], vals[order]
    k = np.clip(np.searchsorted(keys, ext), 0, len(keys) - 1)
    hit = (keys[k] == ext) & (ext >= 0)
    return np.where(hit, vals[k], KERNEL_DTYPES.index("unknown"))


def _resolve_tc(tc: np.ndarray, dtype: np.ndarray, mm: np.ndarray, gpu: GpuInfo) -> np.ndarray:
    """Fill in tensor-core use the name left open, where the dtype and the GPU settle it."""
    out = tc.copy()
    open_ = mm & (tc == 2)
    cc = gpu.compute_capability
    if gpu.has_tensor_cores is False:
        out[open_] = 0
        return out
    fp32 = dtype == KERNEL_DTYPES.index("fp32")
    if cc is not None and cc < (8, 0):
        out[open_ & fp32] = 0  # no TF32 before Ampere: fp32 math cannot use tensor cores
    if gpu.has_tensor_cores:
        half = member(dtype, [KERNEL_DTYPES.index(d) for d in _HALF_DTYPES])
        out[open_ & half] = 1
    return out


def _top(
    table: TraceTable,
    codes: np.ndarray,
    inv: np.ndarray,
    cats: list[KernelCategory],
    dur: np.ndarray,
    dtype_idx: np.ndarray,
    tc_idx: np.ndarray,
    top_n: int,
) -> tuple[KernelRow, ...]:
    n = len(codes)
    count = np.bincount(inv, minlength=n)
    total = np.bincount(inv, dur, minlength=n)
    grand = float(dur.sum())
    nd = len(KERNEL_DTYPES)
    by_dtype = np.bincount(inv * nd + dtype_idx, dur, minlength=n * nd).reshape(n, nd)
    by_tc = np.bincount(inv * 3 + tc_idx, dur, minlength=n * 3).reshape(n, 3)
    # the dtype / tensor-core state holding most of the name's time (ties: the first state)
    dtype_of = by_dtype.argmax(axis=1)
    tc_of = by_tc.argmax(axis=1)
    order = np.lexsort((codes, -total))[: max(top_n, 0)]
    return tuple(
        KernelRow(
            name=table.names[codes[i]],
            category=cats[i],
            count=int(count[i]),
            total_ms=float(total[i]) / 1e3,
            mean_us=float(total[i] / count[i]),
            share_of_gpu_time=float(total[i] / grand) if grand > 0 else 0.0,
            tensor_core=_TC_STATES[tc_of[i]],
            dtype=KERNEL_DTYPES[dtype_of[i]],
            family=(info := classify_kernel(table.names[codes[i]])).family,
            dtype_in_name=info.dtype_in_name,
        )
        for i in order.tolist()
    )


def gpu_info(table: TraceTable, rows: np.ndarray | None = None) -> GpuInfo:
    """The GPU that ran most of ``rows`` (device activities), from deviceProperties."""
    devices = table.meta.devices
    if not devices:
        return GpuInfo(None, None, None, None)
    dev = 0
    if rows is not None and len(rows):
        ids = table.device[rows].astype(np.int64)
        ok = ids >= 0
        if ok.any():
            dev = int(np.bincount(ids[ok], table.dur[rows][ok]).argmax())
    props = next((d for d in devices if d.get("id") == dev), devices[0])
    return _props_info(props)


def _props_info(props: dict[str, Any]) -> GpuInfo:
    name = props.get("name")
    major, minor = props.get("computeMajor"), props.get("computeMinor")
    cc = (major, minor) if isinstance(major, int) and isinstance(minor, int) else None
    mem = props.get("totalGlobalMem")
    has_tc = None if cc is None else cc >= (9, 0) if _is_amd(name) else cc >= (7, 0)
    return GpuInfo(
        name=str(name) if name is not None else None,
        compute_capability=cc,
        has_tensor_cores=has_tc,
        total_memory_bytes=int(mem) if isinstance(mem, int | float) else None,
    )


def _is_amd(name: object) -> bool:
    text = str(name).upper()
    return any(w in text for w in ("AMD", "RADEON", "INSTINCT", " MI2", " MI3"))
